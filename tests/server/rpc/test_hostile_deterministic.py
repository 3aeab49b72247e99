"""Issue #22, case 5 through a real server: in deterministic mode δ / δmax count CP-SAT's
deterministic time, whose wall cost varies with the model, so the caller's deadline must stay the
hard cap: a deterministic request with a tiny deadline is answered within it (or
DEADLINE_EXCEEDED), and the server lets go of the decision soon after."""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import pytest

from hpcdispatch.proto_convert import snapshot_to_pb
from hpcdispatch.server.rpc.app import RunningServer
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import PRESETS
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc
from tests.observability import metrics_server, scrape_text, value


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with metrics_server(workers=3) as running:
        yield running


@pytest.mark.parametrize("dispatcher", [pb.DISPATCHER_PCP19, pb.DISPATCHER_PCP20])
def test_a_deterministic_request_with_a_tiny_deadline_is_capped_by_it(
    server: RunningServer, dispatcher: int,
) -> None:
    # KIT ForHLR II (1,173 nodes), a long queue: building and solving take seconds.
    request = snapshot_to_pb(synthetic_snapshot(PRESETS["kit-forhlr2"], 300, 0.7, seed=2))
    request.dispatcher = pb.Dispatcher.ValueType(dispatcher)
    request.search.profile = "papers"
    request.search.deterministic = True
    request.search.delta_ms = 20_000  # deterministic limits far beyond the deadline
    request.search.delta_max_ms = 40_000
    assert server.metrics_port is not None
    abandoned_before = value(scrape_text(server.metrics_port),
                             "hpcdispatch_decisions_abandoned_total")
    deadline = 0.8
    with grpc.insecure_channel(server.target) as channel:
        try:
            response = pb_grpc.DispatcherServiceStub(channel).Dispatch(request, timeout=deadline)
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED  # type: ignore[attr-defined]
            response = None
        else:
            assert response.report.total_seconds <= deadline
            # Answered: its search, if any, was cut by the deadline, not its 20 s of
            # deterministic time.
            for attempt in response.report.attempts:
                assert attempt.ended_by in (pb.ATTEMPT_END_DEADLINE, pb.ATTEMPT_END_PROOF)
    assert server.metrics_port is not None
    give_up = time.monotonic() + 300  # a hang guard: the verdicts are the events
    while value(scrape_text(server.metrics_port), "hpcdispatch_decisions_in_progress") > 0:
        assert time.monotonic() < give_up, "the decision went on past its deadline"
        time.sleep(0.05)
    if response is None:  # not answered: abandoned at its deadline, at some stage
        text = scrape_text(server.metrics_port)
        assert value(text, "hpcdispatch_decisions_abandoned_total") >= abandoned_before + 1
