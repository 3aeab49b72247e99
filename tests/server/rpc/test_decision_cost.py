"""Admission's measured cost (server/rpc/admission.py, CostBook), through a real server on
loopback: kept per (dispatcher, profile), never weighed against a call a free slot can serve,
and fading with time (issue #49: after one slow `book` decision, an idle server refused 5 of 5
cheap `qos` decisions of the same dispatcher with a 5 s deadline).

Deterministic: the slow decision is a cost record on a fake clock, the busy slot the stand-in
`tests.instances.Held`, released by the test; WAIT only bounds the waiting."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest

from hpcdispatch.server.rpc.admission import CostBook
from hpcdispatch.server.rpc.app import RunningServer
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc
from tests.instances import Held
from tests.server.sessions.test_session_calls import (
    SHORT_DEADLINE,
    WAIT,
    metric,
    snapshot,
    wait_for,
)

SLOW_BOOK_SECONDS = 300.0  # far beyond every deadline below
HALF_LIFE = 60.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def pcp20(profile: str, seed: int) -> pb.DispatchRequest:
    request = snapshot(seed=seed)
    request.dispatcher = pb.DISPATCHER_PCP20
    request.search.profile = profile
    return request


def test_a_slow_book_decision_is_not_held_against_qos_or_an_idle_server_and_fades(
    held: Held, serve: Callable[..., RunningServer],
) -> None:
    server = serve(workers=4, decision_concurrency=1)
    assert server.front is not None
    clock = FakeClock()
    admission = server.front.admission
    admission.costs = CostBook(clock, half_life=HALF_LIFE)
    admission.costs.record((pb.DISPATCHER_PCP20, "book"), SLOW_BOOK_SECONDS)
    with grpc.insecure_channel(server.target) as channel:
        stub = pb_grpc.DispatcherServiceStub(channel)
        # Idle: cheap qos decisions of the same dispatcher are decided (before: 5 of 5 refused).
        for seed in range(5):
            assert stub.Dispatch(pcp20("qos", seed), timeout=SHORT_DEADLINE).time
        # Idle: a book decision too, its slot free (its search is cut at its deadline anyway).
        assert stub.Dispatch(pcp20("book", 10), timeout=WAIT).time
        busy = stub.Dispatch.future(snapshot(seed=11), timeout=WAIT)  # held: the only slot
        try:
            assert held.entered.wait(WAIT), "the held decision did not start"
            # It would have to wait, and its measured cost leaves no time: refused at once.
            with pytest.raises(grpc.RpcError) as refused:
                stub.Dispatch(pcp20("book", 12), timeout=WAIT)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert metric(server, "hpcdispatch_decisions_refused_total", reason="deadline") == 1
            # Twenty half-lives with no book decision: the cost has faded, the same call waits.
            clock.now += 20 * HALF_LIFE
            later = stub.Dispatch.future(pcp20("book", 12), timeout=WAIT)
            wait_for(lambda: admission.waiting == 1, "the book decision waits for the slot")
        finally:
            held.release.set()
        assert busy.result(timeout=WAIT).time
        assert later.result(timeout=WAIT).time
    assert metric(server, "hpcdispatch_decisions_refused_total", reason="deadline") == 1
