"""Does a conservative decision end by the caller's deadline? (issue #33, item 5)

A server in a child process (`start_server`, defaults but `listen`) gets, over real gRPC,
random mid-size snapshots (`synthetic_snapshot`: KIT ForHLR II and Eurora, 90 % busy, a few
hundred queued jobs, the `walltime` predictor), each twice: once as it is and once 60 s later
(the second decision starts from the reservations the first left), each call with the same
deadline. Per call: the wall time from send to answer, and the status.

    .venv/bin/python -m benchmarks.service.conservative_deadline [--deadline 2] [--seeds 3]
        [--queued 200,400,800]

Prints one line per call and a summary: the longest answer as a share of the deadline, how many
calls ended DEADLINE_EXCEEDED, and how long the server went on deciding after a caller's
deadline. The server keeps back a tenth of the deadline (at least 0.2 s) to stop, check and
answer, so an answer after the deadline means some stage did not stop in time. The server has
one decision thread (`workers` 2): after each call, decisions on a five-job snapshot are sent
until one is taken (every 50 ms), which tells when the measured decision really ended; a few
more then bring admission's cost of conservative down (it learns a dispatcher's cost from its
decisions, and one cut by its deadline costs the whole of it, after which it refuses the next
such call at once).
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing as mp
import sys
import time

import grpc

from benchmarks.service.knowledge_base_memory import serve
from hpcdispatch.proto_convert import snapshot_to_pb
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import PRESETS
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc


def call(stub: pb_grpc.DispatcherServiceStub, request: pb.DispatchRequest,
         deadline: float) -> tuple[float, str]:
    began = time.monotonic()
    try:
        stub.Dispatch(request, timeout=deadline)
        status = "OK"
    except grpc.RpcError as exc:
        status = exc.code().name
    return time.monotonic() - began, status


def small_decisions(stub: pb_grpc.DispatcherServiceStub, count: int = 12) -> float:
    """Decisions of a few milliseconds until `count` were taken; returns when the first was
    (time.monotonic()): the decision before it had ended by then."""
    request = snapshot_to_pb(synthetic_snapshot(PRESETS["eurora"], 5, seed=1))
    request.cluster = "small"
    request.dispatcher = pb.DISPATCHER_CONSERVATIVE
    first, taken = 0.0, 0
    while taken < count:
        try:
            stub.Dispatch(request, timeout=60)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
            time.sleep(0.05)  # the decision thread is still busy
            continue
        first, taken = first or time.monotonic(), taken + 1
    return first


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deadline", type=float, default=2.0, help="seconds per call")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--queued", default="200,400,800")
    args = parser.parse_args(argv)
    parent, child = mp.Pipe()
    process = mp.get_context("spawn").Process(target=serve, args=({"workers": 2}, child))
    process.start()
    worst, late, calls, overrun = 0.0, 0, 0, 0.0
    try:
        stub = pb_grpc.DispatcherServiceStub(grpc.insecure_channel(parent.recv()))
        small_decisions(stub)
        for preset in ("kit-forhlr2", "eurora"):
            for queued in (int(q) for q in args.queued.split(",")):
                for seed in range(args.seeds):
                    first = synthetic_snapshot(PRESETS[preset], queued, busy=0.9, seed=seed)
                    for snapshot in (first, dataclasses.replace(first, time=first.time + 60)):
                        request = snapshot_to_pb(snapshot)
                        request.cluster = f"{preset}-{queued}-{seed}"
                        request.dispatcher = pb.DISPATCHER_CONSERVATIVE
                        request.predictor = pb.PREDICTOR_WALLTIME
                        sent = time.monotonic()
                        seconds, status = call(stub, request, args.deadline)
                        ended = small_decisions(stub) - sent  # when the decision had ended
                        calls += 1
                        worst = max(worst, seconds)
                        late += status == "DEADLINE_EXCEEDED"
                        overrun = max(overrun, ended - args.deadline)
                        print(f"{preset} queued {queued} seed {seed} t {snapshot.time}: "
                              f"{seconds:.2f} s {status}, decision over within {ended:.2f} s",
                              flush=True)
    finally:
        parent.send("stop")
        process.join(timeout=60)
    print(f"{calls} calls, deadline {args.deadline} s: longest answer {worst:.2f} s "
          f"({worst / args.deadline:.2f} of the deadline), {late} DEADLINE_EXCEEDED; decisions "
          f"over at most {max(overrun, 0.0):.2f} s after their caller's deadline")
    return 0


if __name__ == "__main__":
    sys.exit(main())
