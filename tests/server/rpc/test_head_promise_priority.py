"""EASY's and LOS's head promise holds under a site's priorities (issue #50 item 5), through a
real gRPC session on loopback and an in-process session: a job of higher priority that arrives
after the head was promised does not take its place (`easy.promise_holder_first`); it is the
head once the promised job starts. Without a held promise the queue is in priority order.

Nodes n0, n1 busy until T + 300 and n2, n3 until T + 1,000 (four cores each; requested times,
predictor `walltime`: the plan is at the limits, so the head's reservation is a promise); node
s has two cores free, where one-core jobs of 50 s backfill (EASY reserves for its head only
when a job after it fits now). "low" and "high" ask for two whole four-core nodes."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest

from hpcdispatch.server.in_process import InProcessService
from hpcdispatch.server.rpc.app import RunningServer
from hpcdispatch.snapshot import QueuedJob, RunningJob, UnitAllocation
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc
from tests.server.rpc.test_site_rules import WAIT, T

HEAD_PROMISERS = ("easy", "los")


def busy() -> pb.DispatchRequest:
    request = pb.DispatchRequest(time=T, predictor=pb.PREDICTOR_WALLTIME,
                                 cluster="head-promise-priority")
    for node_id in ("n0", "n1", "n2", "n3"):
        request.nodes.add(id=node_id, state=pb.NODE_STATE_UP, capacity={"core": 4})
    request.nodes.add(id="s", state=pb.NODE_STATE_UP, capacity={"core": 2})
    for job_id, nodes, ends in (("r-a", ("n0", "n1"), T + 300), ("r-b", ("n2", "n3"), T + 1_000)):
        request.running_jobs.add(id=job_id, user="u", start_time=T - 10,
                                 requested_time=ends - T + 10,
                                 units=[pb.UnitAllocation(node_id=n, amounts={"core": 4})
                                        for n in nodes])
    return request


def two_nodes(job_id: str, priority: int, submit: int) -> pb.QueuedJob:
    return pb.QueuedJob(id=job_id, user="u", submit_time=submit, units=2,
                        unit_request={"core": 4}, requested_time=600, priority=priority)


def tiny(job_id: str, submit: int) -> pb.QueuedJob:
    return pb.QueuedJob(id=job_id, user="u", submit_time=submit, units=1,
                        unit_request={"core": 1}, requested_time=50)


def on_s(job_id: str, start: int) -> pb.RunningJob:
    return pb.RunningJob(id=job_id, user="u", start_time=start, requested_time=50,
                         units=[pb.UnitAllocation(node_id="s", amounts={"core": 1})])


@pytest.fixture
def sessions(server: RunningServer) -> Iterator[pb_grpc.SessionServiceStub]:
    with grpc.insecure_channel(server.target) as channel:
        yield pb_grpc.SessionServiceStub(channel)


def promises(response: pb.DispatchResponse) -> dict[str, int]:
    return {e.job_id: e.start_time for e in response.report.expected_starts if e.promised}


def started(response: pb.DispatchResponse) -> set[str]:
    return {s.job_id for s in response.starts}


@pytest.mark.parametrize("name", HEAD_PROMISERS)
def test_a_later_job_of_higher_priority_does_not_take_the_promised_heads_place(
        sessions: pb_grpc.SessionServiceStub, name: str) -> None:
    opened = sessions.OpenSession(pb.OpenSessionRequest(snapshot=busy()), timeout=WAIT)

    def update(sequence: int, t: int, **fields: object) -> pb.DispatchResponse:
        delta = pb.UpdateSessionRequest(session_id=opened.session_id, sequence=sequence,
                                        time=t, dispatcher_name=name, decide=True,
                                        predictor=pb.PREDICTOR_WALLTIME, **fields)
        answer: pb.UpdateSessionResponse = sessions.UpdateSession(delta, timeout=WAIT)
        assert not answer.decision.report.fallback_reason
        return answer.decision

    first = update(1, T, submitted=[two_nodes("low", 0, T - 100), tiny("tiny", T - 50)])
    assert (started(first), promises(first)) == ({"tiny"}, {"low": T + 300})
    second = update(2, T + 10, started=[on_s("tiny", T)],
                    submitted=[two_nodes("high", 100, T + 5), tiny("tiny2", T + 5)])
    # Kept: "high" waits behind the promised head; the one-core job backfills around it.
    assert (started(second), promises(second)) == ({"tiny2"}, {"low": T + 300})
    third = update(3, T + 300, started=[on_s("tiny2", T + 10)],
                   ended_job_ids=["r-a", "tiny"])
    assert started(third) == {"low"}
    sessions.CloseSession(pb.CloseSessionRequest(session_id=opened.session_id), timeout=WAIT)


@pytest.mark.parametrize("name", HEAD_PROMISERS)
def test_without_a_held_promise_the_higher_priority_is_the_head(
        server: RunningServer, name: str) -> None:
    """All three queued at once, no promise held: priority order decides the head (what the
    rule above overrides only for a job already promised)."""
    request = busy()
    request.dispatcher_name = name
    request.queued_jobs.extend([two_nodes("low", 0, T - 100), two_nodes("high", 100, T - 5),
                                tiny("tiny", T - 50)])
    with grpc.insecure_channel(server.target) as channel:
        response = pb_grpc.DispatcherServiceStub(channel).Dispatch(request, timeout=WAIT)
    assert (started(response), promises(response)) == ({"tiny"}, {"high": T + 300})


def test_an_in_process_session_holds_the_head_promise_too() -> None:
    """The replay's path (`InProcessSession`) keeps its decisions' promises as the gRPC
    session does, so its head keeps its place the same way."""
    request = busy()
    request.dispatcher_name = "easy"
    session = InProcessService().open(request)
    session.update(T, (), (), [_domain(two_nodes("low", 0, T - 100)),
                               _domain(tiny("tiny", T - 50))], ())
    assert _promises(session.decide()) == {"low": T + 300}
    session.update(T + 10, (), (), [_domain(two_nodes("high", 100, T + 5)),
                                    _domain(tiny("tiny2", T + 5))],
                   [RunningJob("tiny", "u", "", T, 50, None,
                               (UnitAllocation("s", {"core": 1}),))])
    assert _promises(session.decide()) == {"low": T + 300}


def _domain(q: pb.QueuedJob) -> QueuedJob:
    return QueuedJob(id=q.id, user=q.user, name="", queue="", submit_time=q.submit_time,
                     units=q.units, unit_request=dict(q.unit_request),
                     requested_time=q.requested_time, priority=q.priority)


def _promises(decided: object) -> dict[str, int]:
    result = decided.result  # type: ignore[attr-defined]
    problem = result.problem
    return {problem.jobs[i].id: problem.t + s
            for i, (s, promised) in result.outcome.expected_starts.items() if promised}
