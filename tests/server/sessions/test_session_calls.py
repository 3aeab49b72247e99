"""Session calls that meet another call or end in an error, through real gRPC on loopback
(issue #33, items 2 and 3).

- A call on a session that is busy with another call is answered at once, ABORTED with the
  ErrorInfo reason SESSION_BUSY, without a decision slot; health probes and other callers are
  answered meanwhile.
- A refused OpenSession (admission, validation, a decision abandoned) creates nothing and
  evicts nothing.
- An UpdateSession either applied its delta, and a resend of the same request gets its answer
  (the answer given, or a decision on the state the delta made when the first call ended in an
  error), or applied nothing.

The slow decision is a stand-in dispatcher (`tests.instances.Held`) that waits for the test to
release it, so every check below is an event (a call answered, a counter moved), never a
duration: WAIT only bounds the waiting for events that take milliseconds, and is reached only
when the behaviour is broken.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status

from hpcdispatch.proto_convert import snapshot_to_pb
from hpcdispatch.server.rpc.app import RunningServer
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import homogeneous
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc
from tests.instances import Held

SYSTEM = homogeneous("h8", 8, {"core": 32, "mem": 131072})
WAIT = 30.0  # seconds: bounds events of milliseconds; reached only when something is broken
# A deadline the call reaches its (held) decision well within: the intake of a small delta and
# a free decision slot take milliseconds even on a loaded machine.
SHORT_DEADLINE = 5.0


def snapshot(seed: int = 1) -> pb.DispatchRequest:
    request = snapshot_to_pb(synthetic_snapshot(SYSTEM, 10, 0.5, seed=seed))
    request.dispatcher = pb.DISPATCHER_FCFS
    request.predictor = pb.PREDICTOR_WALLTIME
    return request


def new_job(request: pb.DispatchRequest, job_id: str = "new") -> pb.QueuedJob:
    return pb.QueuedJob(id=job_id, user="u", submit_time=request.time, units=1,
                        unit_request={"core": 1}, requested_time=600)


def delta(session_id: str, sequence: int, time_: int, decide: bool = True,
          **fields: object) -> pb.UpdateSessionRequest:
    return pb.UpdateSessionRequest(session_id=session_id, sequence=sequence, time=time_,
                                   decide=decide, dispatcher=pb.DISPATCHER_FCFS,
                                   predictor=pb.PREDICTOR_WALLTIME, **fields)


def metric(server: RunningServer, name: str, **labels: str) -> float:
    return server.metrics.registry.get_sample_value(name, labels) or 0.0


def refused_decisions(server: RunningServer) -> float:
    return sum(metric(server, "hpcdispatch_decisions_refused_total", reason=reason)
               for reason in ("threads", "deadline", "cancelled"))


def wait_for(condition: Callable[[], bool], what: str) -> None:
    """Wait for an event of milliseconds (WAIT is reached only when it never comes)."""
    end = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < end, f"not reached: {what}"
        time.sleep(0.005)


def error_info(error: grpc.RpcError) -> error_details_pb2.ErrorInfo:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None, "no rich error details"
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return info
    raise AssertionError("no ErrorInfo in the error's details")


def open_sessions(stub: pb_grpc.SessionServiceStub, count: int) -> list[str]:
    return [stub.OpenSession(pb.OpenSessionRequest(snapshot=snapshot(seed=i)),
                             timeout=WAIT).session_id for i in range(count)]


def still_open(stub: pb_grpc.SessionServiceStub, session_ids: list[str]) -> list[bool]:
    """Whether each session still takes its next delta (sequence 1)."""
    alive = []
    for session_id in session_ids:
        try:
            stub.UpdateSession(delta(session_id, 1, snapshot().time, decide=False),
                               timeout=WAIT)
            alive.append(True)
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.FAILED_PRECONDITION, error
            alive.append(False)
    return alive


# -- item 2: a busy session answers at once, and nobody waits behind it ----------------------


def test_calls_on_a_session_busy_deciding_are_refused_at_once_while_probes_are_answered(
    held: Held, serve: Callable[..., RunningServer],
) -> None:
    server = serve(workers=4)  # the default: 3 decision threads, one thread for the rest
    with grpc.insecure_channel(server.target) as channel:
        sessions = pb_grpc.SessionServiceStub(channel)  # no retries: see each answer itself
        health = health_pb2_grpc.HealthStub(channel)
        opened = sessions.OpenSession(pb.OpenSessionRequest(snapshot=snapshot()), timeout=WAIT)
        update = delta(opened.session_id, 1, snapshot().time + 60,
                       submitted=[new_job(snapshot())])
        calls = [sessions.UpdateSession.future(update, timeout=WAIT) for _ in range(6)]
        assert held.entered.wait(WAIT), "no call began its decision"
        probes = [health.Check.future(health_pb2.HealthCheckRequest(service=service),
                                      timeout=WAIT)
                  for service in ("", "hpcdispatch.v1.SessionService") * 5]
        try:
            wait_for(lambda: sum(call.done() for call in calls) == 5,
                     "five of the six calls answered while the sixth decides")
            for probe in probes:
                assert probe.result().status == health_pb2.HealthCheckResponse.SERVING
            # Other callers go on: another session, and a call that changes nothing.
            other = sessions.OpenSession(pb.OpenSessionRequest(snapshot=snapshot(seed=2)),
                                         timeout=WAIT)
            assert sessions.UpdateSession(delta(other.session_id, 1, snapshot().time,
                                                decide=False), timeout=WAIT).sequence == 1
            with pytest.raises(grpc.RpcError) as not_deciding:  # busy for a delta alone too
                sessions.UpdateSession(delta(opened.session_id, 1, snapshot().time,
                                             decide=False), timeout=WAIT)
            refused = [call.exception() for call in calls if call.done()]
            refused.append(not_deciding.value)
            # Each refused at once, saying why, without a decision slot or its queue.
            assert metric(server, "hpcdispatch_decisions_in_progress") == 1
            assert metric(server, "hpcdispatch_decisions_waiting") == 0
            assert refused_decisions(server) == 0
            assert metric(server, "hpcdispatch_session_busy_total") == 6
            for error in refused:
                assert isinstance(error, grpc.RpcError)
                assert error.code() == grpc.StatusCode.ABORTED, error
                assert "busy" in (error.details() or "")
                info = error_info(error)
                assert (info.reason, info.domain) == ("SESSION_BUSY", "hpcdispatch.v1")
                assert info.metadata["session"] != opened.session_id  # a tag, not the secret
        finally:
            held.release.set()
        answered = [call.result() for call in calls if call.exception() is None]
        assert len(answered) == 1 and answered[0].sequence == 1
        assert held.calls == 1, "only the call that held the session decided"
        assert sessions.UpdateSession(delta(opened.session_id, 2, snapshot().time + 60,
                                            decide=False), timeout=WAIT).sequence == 2


# -- item 3a: a refused OpenSession creates and evicts nothing ------------------------------


def test_open_sessions_refused_by_admission_or_validation_create_and_evict_nothing(
    held: Held, serve: Callable[..., RunningServer],
) -> None:
    server = serve(workers=2, max_sessions=16)  # one decision thread
    with grpc.insecure_channel(server.target) as channel:
        sessions = pb_grpc.SessionServiceStub(channel)
        live = open_sessions(sessions, 16)
        busy = pb_grpc.DispatcherServiceStub(channel).Dispatch.future(snapshot(), timeout=WAIT)
        assert held.entered.wait(WAIT), "the decision holding the thread did not start"
        try:
            for _ in range(5):
                with pytest.raises(grpc.RpcError) as refused:
                    sessions.OpenSession(pb.OpenSessionRequest(snapshot=snapshot(), decide=True),
                                         timeout=WAIT)
                assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            invalid = snapshot()
            invalid.queued_jobs[0].units = 0
            for _ in range(5):
                with pytest.raises(grpc.RpcError) as rejected:
                    sessions.OpenSession(pb.OpenSessionRequest(snapshot=invalid, decide=True),
                                         timeout=WAIT)
                assert rejected.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        finally:
            held.release.set()
        assert busy.result().time == snapshot().time
        assert metric(server, "hpcdispatch_sessions_open") == 16
        assert metric(server, "hpcdispatch_sessions_forgotten_total", why="evicted") == 0
        assert still_open(sessions, live) == [True] * 16


def test_an_open_session_whose_decision_was_abandoned_creates_and_evicts_nothing(
    held: Held, serve: Callable[..., RunningServer],
) -> None:
    server = serve(max_sessions=4)
    with grpc.insecure_channel(server.target) as channel:
        sessions = pb_grpc.SessionServiceStub(channel)
        live = open_sessions(sessions, 4)
        call = sessions.OpenSession.future(
            pb.OpenSessionRequest(snapshot=snapshot(), decide=True), timeout=WAIT)
        assert held.entered.wait(WAIT), "the opening decision did not start"
        call.cancel()  # the caller leaves while its decision is being made
        wait_for(lambda: metric(server, "hpcdispatch_decisions_abandoned_total",
                                stage="check") == 1, "the server gave the decision up")
        assert metric(server, "hpcdispatch_sessions_open") == 4
        assert metric(server, "hpcdispatch_sessions_forgotten_total", why="evicted") == 0
        assert still_open(sessions, live) == [True] * 4


# -- item 3b: an UpdateSession applied its delta and answers its resend, or applied nothing ---


@pytest.mark.parametrize("ending", ["deadline", "cancelled"])
def test_a_resend_of_an_update_that_failed_after_applying_gets_the_decision(
    held: Held, serve: Callable[..., RunningServer], ending: str,
) -> None:
    server = serve()
    first = snapshot()
    job = new_job(first)
    with grpc.insecure_channel(server.target) as channel:
        sessions = pb_grpc.SessionServiceStub(channel)
        session_id = sessions.OpenSession(pb.OpenSessionRequest(snapshot=first),
                                          timeout=WAIT).session_id
        update = delta(session_id, 1, first.time + 60, submitted=[job])
        call = sessions.UpdateSession.future(
            update, timeout=SHORT_DEADLINE if ending == "deadline" else WAIT)
        assert held.entered.wait(WAIT), "the update's decision did not start"
        if ending == "cancelled":
            call.cancel()
        else:
            assert call.exception(timeout=WAIT).code() == grpc.StatusCode.DEADLINE_EXCEEDED
        wait_for(lambda: metric(server, "hpcdispatch_decisions_abandoned_total",
                                stage="check") == 1, "the server gave the decision up")
        held.release.set()
        again = sessions.UpdateSession(update, timeout=WAIT)  # the very same request
        # The delta was applied once: the decision is Dispatch's on the full state after it.
        full = pb.DispatchRequest()
        full.CopyFrom(first)
        full.time = update.time
        full.queued_jobs.append(job)
        expected = pb_grpc.DispatcherServiceStub(channel).Dispatch(full, timeout=WAIT)
        assert again.sequence == 1
        assert [s.job_id for s in again.decision.starts] == [s.job_id for s in expected.starts]
        assert metric(server, "hpcdispatch_session_resends_total", answer="decided") == 1
        # and only once: the job is queued in the session once, and cancelling it is the end
        cancel = delta(session_id, 2, first.time + 60, decide=False, cancelled_job_ids=["new"])
        assert sessions.UpdateSession(cancel, timeout=WAIT).sequence == 2


def test_a_resend_after_an_answer_gets_that_answer_and_applies_nothing(
    held: Held, serve: Callable[..., RunningServer],
) -> None:
    held.release.set()
    server = serve()
    first = snapshot()
    with grpc.insecure_channel(server.target) as channel:
        sessions = pb_grpc.SessionServiceStub(channel)
        session_id = sessions.OpenSession(pb.OpenSessionRequest(snapshot=first),
                                          timeout=WAIT).session_id
        deciding = delta(session_id, 1, first.time + 60, submitted=[new_job(first)])
        answer = sessions.UpdateSession(deciding, timeout=WAIT)
        again = sessions.UpdateSession(deciding, timeout=WAIT)
        # The answer given, byte for byte (its report's timings included), not a new decision.
        assert again.SerializeToString() == answer.SerializeToString()
        assert held.calls == 1
        plain = delta(session_id, 2, first.time + 120, decide=False,
                      submitted=[new_job(first, "newer")])
        assert sessions.UpdateSession(plain, timeout=WAIT).sequence == 2
        assert sessions.UpdateSession(plain, timeout=WAIT).sequence == 2
        assert metric(server, "hpcdispatch_session_resends_total", answer="kept") == 2
        # Another delta under a number already used is a sequence gap; the session is as it was.
        other = delta(session_id, 2, first.time + 120, decide=False, cancelled_job_ids=["new"])
        with pytest.raises(grpc.RpcError) as gap:
            sessions.UpdateSession(other, timeout=WAIT)
        assert gap.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert error_info(gap.value).reason == "SEQUENCE_GAP"
        assert "already applied" in (gap.value.details() or "")
        both = delta(session_id, 3, first.time + 120, decide=False,
                     cancelled_job_ids=["new", "newer"])
        assert sessions.UpdateSession(both, timeout=WAIT).sequence == 3


def test_an_update_refused_a_decision_slot_applies_nothing(
    held: Held, serve: Callable[..., RunningServer],
) -> None:
    server = serve(workers=2)  # one decision thread
    first = snapshot()
    with grpc.insecure_channel(server.target) as channel:
        sessions = pb_grpc.SessionServiceStub(channel)
        session_id = sessions.OpenSession(pb.OpenSessionRequest(snapshot=first),
                                          timeout=WAIT).session_id
        busy = pb_grpc.DispatcherServiceStub(channel).Dispatch.future(first, timeout=WAIT)
        assert held.entered.wait(WAIT), "the decision holding the thread did not start"
        update = delta(session_id, 1, first.time + 60, submitted=[new_job(first)])
        try:
            with pytest.raises(grpc.RpcError) as refused:
                sessions.UpdateSession(update, timeout=WAIT)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        finally:
            held.release.set()
        busy.result()
        assert sessions.UpdateSession(update, timeout=WAIT).sequence == 1  # applied now
        assert metric(server, "hpcdispatch_session_resends_total", answer="kept") == 0
        assert metric(server, "hpcdispatch_session_resends_total", answer="decided") == 0
