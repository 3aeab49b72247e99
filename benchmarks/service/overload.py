"""Goodput under overload (issue #11): a real `hpcdispatch serve` process offered 4x what it
can decide, the capacity measured side by side in the same run.

First as many closed-loop callers as the server has decision slots, on one KIT-size snapshot
(1,173 nodes, 85 % busy, 150 queued, PCP'20, `walltime`), give decisions per second C and the
latency of one decision L. Then callers send the same snapshot open-loop at 4 C per second for
a few seconds, each with a deadline of max(1 s, 5 L). Goodput counts the decisions answered
before their deadline, each checked against the snapshot; the ratio to C is the figure (it was
a test's assertion until issue #33: a ratio of two timings belongs here, not in a verdict).

    python -m benchmarks.service.overload [--overload 4] [--capacity-seconds 4]
        [--overload-seconds 6]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc

from hpcdispatch.client import DispatcherClient
from hpcdispatch.decision_check import check_decision
from hpcdispatch.proto_convert import decision_from_pb, snapshot_to_pb
from hpcdispatch.snapshot import Snapshot
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import PRESETS
from hpcdispatch.v1 import dispatcher_pb2 as pb

METHOD = "/hpcdispatch.v1.DispatcherService/Dispatch"
SLOTS = 2  # the server's decision_concurrency


def overload_snapshot() -> tuple[Snapshot, bytes]:
    """The KIT-size snapshot every call sends, and its serialized PCP'20 request."""
    snapshot = synthetic_snapshot(PRESETS["kit-forhlr2"], queued=150, busy=0.85, seed=11)
    request = snapshot_to_pb(snapshot)
    request.dispatcher = pb.DISPATCHER_PCP20
    return snapshot, request.SerializeToString()


@contextmanager
def serve_process(metrics_port: int, log: Path) -> Iterator[str]:
    """`hpcdispatch serve` on a free port with SLOTS decision slots, its log in a file (a pipe
    nobody reads would fill up and stall the server); yields its target."""
    env = {**os.environ, "HPCDISPATCH_LISTEN": "127.0.0.1:0", "HPCDISPATCH_LOG_FORMAT": "json",
           "HPCDISPATCH_WORKERS": "33", "HPCDISPATCH_DECISION_CONCURRENCY": str(SLOTS),
           "HPCDISPATCH_DEFAULT_PREDICTOR": "walltime",
           "HPCDISPATCH_METRICS_PORT": str(metrics_port)}
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "hpcdispatch", "serve"], env=env,
                                stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        port = None
        give_up = time.monotonic() + 300
        while port is None:
            if proc.poll() is not None:
                raise RuntimeError("server exited:\n" + log.read_text())
            if time.monotonic() > give_up:
                raise RuntimeError("server did not start:\n" + log.read_text())
            for line in log.read_text().splitlines():
                if '"serving"' in line:
                    port = json.loads(line)["port"]
            time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def dispatch_method(channel: grpc.Channel) -> Any:
    """Dispatch on pre-serialized requests (the callers' cost stays out of the server's)."""
    return channel.unary_unary(
        METHOD, request_serializer=None, response_deserializer=pb.DispatchResponse.FromString
    )


def measure(overload: float, capacity_seconds: float, overload_seconds: float,
            metrics_port: int, log: Path) -> str:
    snapshot, payload = overload_snapshot()
    with serve_process(metrics_port, log) as target, grpc.insecure_channel(
        target, options=[("grpc.max_send_message_length", 64 * 1024 * 1024)]
    ) as channel:
        DispatcherClient(target).wait_ready(timeout=60)
        dispatch = dispatch_method(channel)
        dispatch(payload, timeout=120)  # warm-up: the node table is built once

        # Capacity: SLOTS closed-loop callers.
        latencies: list[float] = []

        def closed_loop(end: float) -> None:
            while time.monotonic() < end:
                started = time.monotonic()
                dispatch(payload, timeout=120)
                latencies.append(time.monotonic() - started)

        begin = time.monotonic()
        with ThreadPoolExecutor(SLOTS) as pool:
            for f in [pool.submit(closed_loop, begin + capacity_seconds) for _ in range(SLOTS)]:
                f.result()
        capacity = len(latencies) / (time.monotonic() - begin)
        latency = statistics.median(latencies)
        deadline = max(1.0, 5 * latency)

        # Overload: open loop at `overload` x capacity, each call with `deadline`.
        interval = 1.0 / (overload * capacity)
        calls: list[Any] = []
        begin = time.monotonic()
        while (now := time.monotonic()) < begin + overload_seconds:
            if now >= begin + len(calls) * interval:
                calls.append(dispatch.future(payload, timeout=deadline))
            else:
                time.sleep(min(interval / 4, 0.005))
        codes: Counter[str] = Counter()
        for call in calls:
            try:
                response = call.result()
            except grpc.RpcError as error:
                codes[error.code().name] += 1
                continue
            if check_decision(snapshot, decision_from_pb(response)):
                codes["INVALID"] += 1  # never seen: every answer passes the check
                continue
            codes["OK"] += 1
        goodput = codes["OK"] / overload_seconds
        return (f"capacity C {capacity:.2f}/s, latency p50 {latency * 1000:.0f} ms, deadline "
                f"{deadline:.2f} s; at {overload:.0f}x ({len(calls)} calls): goodput "
                f"{goodput:.2f}/s = {goodput / capacity:.0%} of C; {dict(codes)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--overload", type=float, default=4.0)
    parser.add_argument("--capacity-seconds", type=float, default=4.0)
    parser.add_argument("--overload-seconds", type=float, default=6.0)
    parser.add_argument("--metrics-port", type=int, default=0,
                        help="the server's /metrics port (0: a free one)")
    args = parser.parse_args(argv)
    port = args.metrics_port or _free_port()
    with tempfile.TemporaryDirectory(prefix="hpcdispatch-overload-") as folder:
        print(measure(args.overload, args.capacity_seconds, args.overload_seconds, port,
                      Path(folder) / "server.log"))
    return 0


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


if __name__ == "__main__":
    raise SystemExit(main())
