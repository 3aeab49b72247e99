"""Under overload the server refuses what it cannot decide in time and keeps answering: a real
`hpcdispatch serve` process (two decision slots) gets a burst of 40 KIT-size decisions at once,
each with a deadline of a few decisions' time.

Checked by events, whatever the machine's load: every call ends OK, RESOURCE_EXHAUSTED
(refused by admission) or DEADLINE_EXCEEDED; admission refuses some; every answer passes the
independent check; afterwards no decision holds a slot or waits, and the server answers again.
How much of its capacity the server still delivers under overload (goodput) is a ratio of
timings: `python -m benchmarks.service.overload` measures it (docs/benchmarks/overload.md §6).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import grpc
import pytest

from benchmarks.service.overload import dispatch_method, overload_snapshot, serve_process
from hpcdispatch.client import DispatcherClient
from hpcdispatch.decision_check import check_decision
from hpcdispatch.proto_convert import decision_from_pb
from tests.observability import free_port, scrape_text, value

BURST = 40


def _gauge(metrics_port: int, name: str) -> float:
    return value(scrape_text(metrics_port), name)


@pytest.mark.slow
def test_a_burst_beyond_capacity_is_refused_in_part_and_every_answer_is_valid(
    tmp_path: Path,
) -> None:
    snapshot, payload = overload_snapshot()
    metrics_port = free_port()
    with serve_process(metrics_port, tmp_path / "server.log") as target, grpc.insecure_channel(
        target, options=[("grpc.max_send_message_length", 64 * 1024 * 1024)]
    ) as channel:
        DispatcherClient(target).wait_ready(timeout=120)
        dispatch = dispatch_method(channel)
        started = time.monotonic()
        dispatch(payload, timeout=300)  # warm-up: the node table, the measured cost
        one = time.monotonic() - started
        # A burst no SLOTS slots can serve within its deadline: 40 decisions at once, each
        # allowed about three decisions' time (admission knows the cost from the warm-up).
        deadline = max(1.0, 3 * one)
        calls = [dispatch.future(payload, timeout=deadline) for _ in range(BURST)]
        codes: Counter[str] = Counter()
        for call in calls:
            try:
                response = call.result()
            except grpc.RpcError as error:
                codes[error.code().name] += 1
                continue
            assert check_decision(snapshot, decision_from_pb(response)) == []
            codes["OK"] += 1
        assert set(codes) <= {"OK", "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED"}, codes
        assert codes["RESOURCE_EXHAUSTED"] >= 1, codes  # refused at once, not left to expire
        refused = value(scrape_text(metrics_port), "hpcdispatch_decisions_refused_total")
        assert refused >= codes["RESOURCE_EXHAUSTED"]
        # Every slot and queue place is given back (a hang guard, not a timing).
        give_up = time.monotonic() + 300
        while (_gauge(metrics_port, "hpcdispatch_decisions_in_progress") > 0
               or _gauge(metrics_port, "hpcdispatch_decisions_waiting") > 0):
            assert time.monotonic() < give_up, "decision slots still held after the burst"
            time.sleep(0.05)
        response = dispatch(payload, timeout=300)  # and the server decides again
        assert check_decision(snapshot, decision_from_pb(response)) == []
