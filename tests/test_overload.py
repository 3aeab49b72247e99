"""Goodput under overload: a real `hpcdispatch serve` process offered 4x what it can decide.

First the server's capacity is measured side by side in the same run: as many closed-loop
callers as it has decision slots, on the same KIT-size snapshot, give decisions per second C
and the latency of one decision L. Then callers send the same snapshot open-loop at 4 C per
second with deadlines of a few L, for a few seconds. Every answered decision is checked
against the snapshot; the decisions answered in time per second must stay >= 80 % of C, and
once the load stops, no abandoned decision may still be running.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest

from hpcdispatch.client import DispatcherClient
from hpcdispatch.decision_check import check_decision
from hpcdispatch.proto_convert import decision_from_pb, snapshot_to_pb
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import PRESETS
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.observability import free_port, scrape_text, value
from tests.processes import stop_process

METHOD = "/hpcdispatch.v1.DispatcherService/Dispatch"
SLOTS = 2
OVERLOAD = 4.0
CAPACITY_SECONDS = 4.0
OVERLOAD_SECONDS = 6.0


@contextmanager
def serve_process(metrics_port: int, log: Path) -> Iterator[str]:
    """`hpcdispatch serve` on a free port, its log in a file (a pipe nobody reads would fill
    up and stall the server)."""
    env = {**os.environ, "HPCDISPATCH_LISTEN": "127.0.0.1:0", "HPCDISPATCH_LOG_FORMAT": "json",
           "HPCDISPATCH_WORKERS": "33", "HPCDISPATCH_DECISION_CONCURRENCY": str(SLOTS),
           "HPCDISPATCH_DEFAULT_PREDICTOR": "walltime",
           "HPCDISPATCH_METRICS_PORT": str(metrics_port)}
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "hpcdispatch", "serve"], env=env,
                                stdout=out, stderr=subprocess.STDOUT, text=True)
    try:
        port = None
        give_up = time.monotonic() + 60
        while port is None:
            assert proc.poll() is None, "server exited:\n" + log.read_text()
            assert time.monotonic() < give_up, "server did not start:\n" + log.read_text()
            for line in log.read_text().splitlines():
                if '"serving"' in line:
                    port = json.loads(line)["port"]
            time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        stop_process(proc, 30)


def _in_progress(metrics_port: int) -> float:
    return value(scrape_text(metrics_port), "hpcdispatch_decisions_in_progress")


@pytest.mark.slow
def test_goodput_at_four_times_capacity_stays_near_capacity(tmp_path: Path) -> None:
    snapshot = synthetic_snapshot(PRESETS["kit-forhlr2"], queued=150, busy=0.85, seed=11)
    request = snapshot_to_pb(snapshot)
    request.dispatcher = pb.DISPATCHER_PCP20
    payload = request.SerializeToString()
    metrics_port = free_port()
    with serve_process(metrics_port, tmp_path / "server.log") as target, grpc.insecure_channel(
        target, options=[("grpc.max_send_message_length", 64 * 1024 * 1024)]
    ) as channel:
        DispatcherClient(target).wait_ready(timeout=30)
        dispatch = channel.unary_unary(
            METHOD, request_serializer=None, response_deserializer=pb.DispatchResponse.FromString
        )
        dispatch(payload, timeout=60)  # warm-up: the node table is built once

        # Capacity: SLOTS closed-loop callers, side by side with the overload below.
        latencies: list[float] = []

        def closed_loop(end: float) -> None:
            while time.monotonic() < end:
                started = time.monotonic()
                dispatch(payload, timeout=60)
                latencies.append(time.monotonic() - started)

        begin = time.monotonic()
        with ThreadPoolExecutor(SLOTS) as pool:
            for f in [pool.submit(closed_loop, begin + CAPACITY_SECONDS) for _ in range(SLOTS)]:
                f.result()
        capacity = len(latencies) / (time.monotonic() - begin)
        latency = statistics.median(latencies)
        deadline = max(1.0, 5 * latency)

        # Overload: open loop at OVERLOAD x capacity, each call with `deadline`.
        interval = 1.0 / (OVERLOAD * capacity)
        calls = []
        begin = time.monotonic()
        sent = 0
        while (now := time.monotonic()) < begin + OVERLOAD_SECONDS:
            if now >= begin + sent * interval:
                calls.append(dispatch.future(payload, timeout=deadline))
                sent += 1
            else:
                time.sleep(min(interval / 4, 0.005))
        codes: Counter[str] = Counter()
        answered_in_time = 0
        for call in calls:
            try:
                response = call.result()
            except grpc.RpcError as error:
                codes[error.code().name] += 1
                continue
            codes["OK"] += 1
            assert check_decision(snapshot, decision_from_pb(response)) == []
            answered_in_time += 1
        elapsed = time.monotonic() - begin  # every call has ended: answered or timed out
        goodput = answered_in_time / OVERLOAD_SECONDS
        print(f"\ncapacity {capacity:.2f}/s, latency p50 {latency * 1000:.0f} ms, deadline "
              f"{deadline:.2f} s; at {OVERLOAD:.0f}x ({len(calls)} calls): goodput "
              f"{goodput:.2f}/s = {goodput / capacity:.0%} of capacity; {dict(codes)}; "
              f"all ended after {elapsed:.1f} s")
        assert set(codes) <= {"OK", "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED"}, codes
        assert goodput >= 0.8 * capacity

        # Abandoned work stops: nothing is still being computed shortly after the last
        # caller's deadline (the old server computed such decisions for 13-24 s more).
        stop_by = time.monotonic() + 2.0
        while _in_progress(metrics_port) > 0:
            assert time.monotonic() < stop_by, "decisions still running for gone callers"
            time.sleep(0.05)
