"""Session streams (StreamSession, issue #36 item 1) through a real gRPC server on loopback.

Each message is answered in order, as its unary call; a message's error ends nothing; what
ends a stream is what the contract says (the caller, the server draining; an idle stream:
tests/server/sessions/test_idle_streams.py).
Slow decisions are the stand-in `tests.instances.Held`, released by the test, so every verdict
is an event (an answer, a status, a counter), never a duration: WAIT only bounds the waiting
for events of milliseconds, and is reached only when the behaviour is broken.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from hpcdispatch.client import DispatcherClient, DispatchSession, channel_credentials
from hpcdispatch.client.call_error import CallError
from hpcdispatch.client.session_stream import SessionStream, StreamRefused
from hpcdispatch.server.rpc.app import RunningServer
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc
from tests.certificates import two_client_pki
from tests.instances import Held
from tests.server.sessions.test_session_calls import (
    WAIT,
    delta,
    metric,
    new_job,
    snapshot,
    wait_for,
)

_CLOSE = None


class RawStream:
    """One StreamSession call seen message by message: `send` puts a message on the stream,
    `answer` reads the next answer (or raises the stream's end as grpc.RpcError)."""

    def __init__(self, channel: grpc.Channel) -> None:
        self._outbox: queue.SimpleQueue[pb.SessionStreamRequest | None] = queue.SimpleQueue()
        self._tag = 0
        # A deadline for the whole stream only so that a broken server cannot hang the test.
        self.call = pb_grpc.SessionServiceStub(channel).StreamSession(
            iter(self._outbox.get, _CLOSE), timeout=10 * WAIT)

    def send(self, timeout_ms: int = 0, **call: object) -> int:
        self._tag += 1
        self._outbox.put(pb.SessionStreamRequest(tag=self._tag, timeout_ms=timeout_ms,
                                                 **call))  # type: ignore[arg-type]
        return self._tag

    def answer(self) -> pb.SessionStreamResponse:
        answer: pb.SessionStreamResponse = next(self.call)
        return answer

    def ask(self, **call: object) -> pb.SessionStreamResponse:
        tag = self.send(**call)
        answer = self.answer()
        assert answer.tag == tag
        return answer

    def close(self) -> None:
        self._outbox.put(_CLOSE)


def opened(stream: RawStream, request: pb.DispatchRequest | None = None) -> str:
    answer = stream.ask(open=pb.OpenSessionRequest(snapshot=request or snapshot()))
    assert answer.WhichOneof("answer") == "opened", answer
    return answer.opened.session_id


def error_detail(answer: pb.SessionStreamResponse, kind: type) -> object:
    assert answer.WhichOneof("answer") == "error", answer
    for detail in answer.error.details:
        unpacked = kind()
        if detail.Unpack(unpacked):
            return unpacked
    raise AssertionError(f"no {kind.__name__} in {answer.error}")


def code_of(answer: pb.SessionStreamResponse) -> grpc.StatusCode:
    assert answer.WhichOneof("answer") == "error", answer
    return next(c for c in grpc.StatusCode if c.value[0] == answer.error.code)


@pytest.fixture
def released_server(held: Held, serve: Callable[..., RunningServer]) -> RunningServer:
    """A server whose FCFS decisions go through at once (Held, released)."""
    held.release.set()
    return serve()


# -- order, errors per message ------------------------------------------------------------------


def test_messages_sent_ahead_are_answered_in_order_as_their_unary_calls(
    released_server: RunningServer,
) -> None:
    first = snapshot()
    with grpc.insecure_channel(released_server.target) as channel:
        stream = RawStream(channel)
        session_id = opened(stream, first)
        jobs = [new_job(first, f"j{i}") for i in range(3)]
        tags = [stream.send(update=delta(session_id, i + 1, first.time + 60 * (i + 1),
                                         submitted=[job]))
                for i, job in enumerate(jobs)]  # all sent before any answer is read
        answers = [stream.answer() for _ in tags]
        assert [a.tag for a in answers] == tags
        assert [a.updated.sequence for a in answers] == [1, 2, 3]
        # The last answer is the unary call's on the same state: Dispatch on the full state.
        full = pb.DispatchRequest()
        full.CopyFrom(first)
        full.time = first.time + 180
        full.queued_jobs.extend(jobs)
        expected = pb_grpc.DispatcherServiceStub(channel).Dispatch(full, timeout=WAIT)
        assert ([s.job_id for s in answers[-1].updated.decision.starts]
                == [s.job_id for s in expected.starts])
        stream.close()
        assert list(stream.call) == []  # the caller closed: the stream ends OK
        assert stream.call.code() == grpc.StatusCode.OK
    assert metric(released_server, "hpcdispatch_session_stream_messages_total", call="update",
                  grpc_code="OK") == 3


def test_a_bad_delta_or_a_gap_is_answered_for_that_message_and_the_stream_goes_on(
    released_server: RunningServer,
) -> None:
    first = snapshot()
    with grpc.insecure_channel(released_server.target) as channel:
        stream = RawStream(channel)
        session_id = opened(stream, first)
        bad = new_job(first, "bad")
        bad.units = 0
        invalid = stream.ask(update=delta(session_id, 1, first.time + 60, submitted=[bad]))
        assert code_of(invalid) == grpc.StatusCode.INVALID_ARGUMENT
        violations = error_detail(invalid, error_details_pb2.BadRequest).field_violations
        assert [v.field for v in violations] == ["update.submitted[0].units"]
        gap = stream.ask(update=delta(session_id, 3, first.time + 60))  # 1 is due
        assert code_of(gap) == grpc.StatusCode.FAILED_PRECONDITION
        info = error_detail(gap, error_details_pb2.ErrorInfo)
        assert (info.reason, info.domain) == ("SEQUENCE_GAP", "hpcdispatch.v1")
        nothing = stream.ask()  # a message without a call
        assert code_of(nothing) == grpc.StatusCode.INVALID_ARGUMENT
        assert [v.field for v in error_detail(
            nothing, error_details_pb2.BadRequest).field_violations] == ["call"]
        # Neither error changed the session: sequence 1 is still the next one.
        good = stream.ask(update=delta(session_id, 1, first.time + 60,
                                       submitted=[new_job(first)]))
        assert good.updated.sequence == 1 and good.updated.decision.time == first.time + 60
        assert stream.ask(close=pb.CloseSessionRequest(session_id=session_id)).HasField(
            "closed")
        stream.close()


def test_completions_go_on_the_stream_and_a_bad_one_names_its_field(
    released_server: RunningServer,
) -> None:
    done = pb.JobCompletion(job_id="a", user="u", units=1, unit_request={"core": 1},
                            requested_time=60, start_time=0, end_time=30)
    bad = pb.JobCompletion()
    bad.CopyFrom(done)
    bad.units = 0
    with grpc.insecure_channel(released_server.target) as channel:
        stream = RawStream(channel)
        refused = stream.ask(report_completions=pb.ReportCompletionsRequest(completions=[bad]))
        assert code_of(refused) == grpc.StatusCode.INVALID_ARGUMENT
        assert [v.field for v in error_detail(refused, error_details_pb2.BadRequest)
                .field_violations] == ["report_completions.completions[0].units"]
        stored = stream.ask(report_completions=pb.ReportCompletionsRequest(completions=[done]))
        assert stored.reported.accepted == 1
        stream.close()


def test_bytes_that_do_not_decode_end_the_stream_with_invalid_argument(
    released_server: RunningServer,
) -> None:
    with grpc.insecure_channel(released_server.target) as channel:
        raw = channel.stream_stream("/hpcdispatch.v1.SessionService/StreamSession")
        good = pb.SessionStreamRequest(tag=1, close=pb.CloseSessionRequest(session_id="x"))
        answers = raw(iter([good.SerializeToString(), b"\xff\xff\xff"]), timeout=WAIT)
        first = pb.SessionStreamResponse.FromString(next(answers))
        assert first.tag == 1 and first.HasField("closed")  # answered before the bad bytes
        with pytest.raises(grpc.RpcError) as ended:
            next(answers)
        assert ended.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "SessionStreamRequest" in (ended.value.details() or "")


# -- busy sessions, cancelled streams, deadlines and resends -----------------------------------


def test_a_message_on_a_busy_session_is_refused_at_once_and_the_stream_goes_on(
    held: Held, serve: Callable[..., RunningServer],
) -> None:
    server = serve(workers=4)
    first = snapshot()
    with grpc.insecure_channel(server.target) as channel:
        sessions = pb_grpc.SessionServiceStub(channel)
        health = health_pb2_grpc.HealthStub(channel)
        session_id = sessions.OpenSession(pb.OpenSessionRequest(snapshot=first),
                                          timeout=WAIT).session_id
        other = sessions.OpenSession(pb.OpenSessionRequest(snapshot=first),
                                     timeout=WAIT).session_id
        deciding = sessions.UpdateSession.future(
            delta(session_id, 1, first.time + 60, submitted=[new_job(first)]), timeout=WAIT)
        assert held.entered.wait(WAIT), "the unary decision did not start"
        stream = RawStream(channel)
        try:
            busy = stream.ask(update=delta(session_id, 1, first.time + 60,
                                           submitted=[new_job(first)]))
            assert code_of(busy) == grpc.StatusCode.ABORTED
            assert error_detail(busy, error_details_pb2.ErrorInfo).reason == "SESSION_BUSY"
            # the stream goes on with another session; probes are answered meanwhile
            assert stream.ask(update=delta(other, 1, first.time, decide=False)).updated \
                .sequence == 1
            assert health.Check(health_pb2.HealthCheckRequest(), timeout=WAIT).status \
                == health_pb2.HealthCheckResponse.SERVING
        finally:
            held.release.set()
        assert deciding.result(timeout=WAIT).sequence == 1
        stream.close()


def test_a_stream_busy_deciding_refuses_other_calls_and_a_cancelled_one_frees_everything(
    held: Held, serve: Callable[..., RunningServer],
) -> None:
    server = serve(workers=3)  # two decision threads
    first = snapshot()
    with grpc.insecure_channel(server.target) as channel:
        sessions = pb_grpc.SessionServiceStub(channel)
        stream = RawStream(channel)
        session_id = opened(stream, first)
        update = delta(session_id, 1, first.time + 60, submitted=[new_job(first)])
        stream.send(update=update)
        assert held.entered.wait(WAIT), "the stream's decision did not start"
        with pytest.raises(grpc.RpcError) as busy:
            sessions.UpdateSession(update, timeout=WAIT)
        assert busy.value.code() == grpc.StatusCode.ABORTED
        assert metric(server, "hpcdispatch_session_streams_open") == 1
        stream.call.cancel()  # the caller leaves mid-decision
        wait_for(lambda: metric(server, "hpcdispatch_session_streams_open") == 0,
                 "the cancelled stream gave its thread back")
        assert metric(server, "hpcdispatch_decisions_abandoned_total", stage="check") == 1
        assert metric(server, "hpcdispatch_decisions_in_progress") == 0
        held.release.set()
        # The delta was applied before its decision: the resend gets a decision on it.
        again = sessions.UpdateSession(update, timeout=WAIT)
        assert again.sequence == 1 and again.decision.time == first.time + 60
        assert metric(server, "hpcdispatch_session_resends_total", answer="decided") == 1


def test_a_message_past_its_deadline_is_answered_so_and_its_resend_gets_the_decision(
    held: Held, serve: Callable[..., RunningServer],
) -> None:
    server = serve()
    first = snapshot()
    with grpc.insecure_channel(server.target) as channel:
        stream = RawStream(channel)
        session_id = opened(stream, first)
        update = delta(session_id, 1, first.time + 60, submitted=[new_job(first)])
        # Held past its deadline; the delta is applied well within it (as SHORT_DEADLINE).
        late = stream.ask(update=update, timeout_ms=5_000)
        assert code_of(late) == grpc.StatusCode.DEADLINE_EXCEEDED
        assert held.entered.is_set(), "the delta was not applied before its deadline"
        held.release.set()
        again = stream.ask(update=update)  # on the same stream
        assert again.updated.sequence == 1
        assert again.updated.decision.time == first.time + 60
        stream.close()
    assert metric(server, "hpcdispatch_session_resends_total", answer="decided") == 1


# -- a server shutting down mid-stream ---------------------------------------------------------


def test_a_stopping_server_answers_the_message_in_progress_then_ends_the_stream(
    held: Held, serve: Callable[..., RunningServer],
) -> None:
    server = serve(grace_seconds=WAIT)
    first = snapshot()
    with grpc.insecure_channel(server.target) as channel:
        stream = RawStream(channel)
        session_id = opened(stream, first)
        health = health_pb2_grpc.HealthStub(channel)
        tag = stream.send(update=delta(session_id, 1, first.time + 60,
                                       submitted=[new_job(first)]))
        assert held.entered.wait(WAIT), "the stream's decision did not start"
        stopping = threading.Thread(target=server.stop)
        stopping.start()
        wait_for(lambda: health.Check(health_pb2.HealthCheckRequest(), timeout=WAIT).status
                 == health_pb2.HealthCheckResponse.NOT_SERVING, "health said NOT_SERVING")
        late = RawStream(channel)  # a new stream while draining is refused
        late.send(open=pb.OpenSessionRequest(snapshot=first))
        with pytest.raises(grpc.RpcError) as refused:
            late.answer()
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
        assert stopping.is_alive(), "the stop did not wait for the decision in progress"
        held.release.set()
        answer = stream.answer()  # the message in progress is answered
        assert answer.tag == tag and answer.updated.sequence == 1
        stream.send(update=delta(session_id, 2, first.time + 120, decide=False))
        with pytest.raises(grpc.RpcError) as ended:  # the next one is not taken up
            stream.answer()
        assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "shutting down" in (ended.value.details() or "")
        stopping.join(WAIT)
        assert not stopping.is_alive()


# -- the client: one stream for the session's calls, its own deadline -------------------------


def test_the_client_session_decides_on_one_stream_as_dispatch_does(
    released_server: RunningServer,
) -> None:
    first = snapshot()
    with DispatcherClient(released_server.target, timeout=WAIT) as client:
        session = client.session()
        assert session.stream is not None
        request = pb.DispatchRequest()
        request.CopyFrom(first)
        for step in range(3):
            request = pb.DispatchRequest()
            request.CopyFrom(first)
            request.time = first.time + 60 * step
            request.queued_jobs.extend(new_job(first, f"j{i}") for i in range(step))
            decided = session.decide(request)
            assert ([s.job_id for s in decided.starts]
                    == [s.job_id for s in client.dispatch(request).starts])
        assert (session.opens, session.deltas, session.resyncs) == (1, 2, 0)
        assert session.stream.streams == 1
        session.close()
    assert metric(released_server, "hpcdispatch_session_stream_messages_total", call="update",
                  grpc_code="OK") == 2
    assert metric(released_server, "hpcdispatch_session_stream_messages_total", call="close",
                  grpc_code="OK") == 1


def test_the_client_gives_up_on_a_stream_that_does_not_answer_in_time() -> None:
    """A server that takes the stream up and never answers: the client's own deadline."""
    never = threading.Event()

    def silent(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        for _ in requests:
            never.wait(WAIT)
        yield from ()

    handler = grpc.method_handlers_generic_handler("hpcdispatch.v1.SessionService", {
        "StreamSession": grpc.stream_stream_rpc_method_handler(silent)})
    server = grpc.server(futures.ThreadPoolExecutor(2))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stream = SessionStream(pb_grpc.SessionServiceStub(channel))
            with pytest.raises(CallError) as late:
                stream.call("close", pb.CloseSessionRequest(session_id="x"), 0.5)
            assert late.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            stream.close()
    finally:
        never.set()
        server.stop(None)


# -- owner-only sessions with mTLS identities ----------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return two_client_pki(tmp_path_factory.mktemp("pki"))


def test_a_stream_reaches_only_the_sessions_of_its_client_identity(
    held: Held, serve: Callable[..., RunningServer], pki: dict[str, Path],
) -> None:
    held.release.set()
    server = serve(tls_cert=str(pki["server_cert"]), tls_key=str(pki["server_key"]),
                   tls_client_ca=str(pki["ca"]), tls_client_identities=("alice", "bob"))
    target = f"localhost:{server.port}"

    def channel_of(who: str) -> grpc.Channel:
        return grpc.secure_channel(target, channel_credentials(
            pki["ca"], pki[f"{who}_cert"], pki[f"{who}_key"]))

    with channel_of("alice") as alice_channel, channel_of("bob") as bob_channel:
        alice, bob = RawStream(alice_channel), RawStream(bob_channel)
        first = snapshot()
        session_id = opened(alice, first)
        stolen = bob.ask(update=delta(session_id, 1, first.time, decide=True))
        assert code_of(stolen) == grpc.StatusCode.FAILED_PRECONDITION
        assert error_detail(stolen, error_details_pb2.ErrorInfo).reason == "UNKNOWN_SESSION"
        assert bob.ask(close=pb.CloseSessionRequest(session_id=session_id)).HasField("closed")
        # Bob's close did nothing; Alice's session goes on, on her stream and unary alike.
        assert alice.ask(update=delta(session_id, 1, first.time, decide=False)).updated \
            .sequence == 1
        unary = pb_grpc.SessionServiceStub(alice_channel).UpdateSession(
            delta(session_id, 2, first.time, decide=False), timeout=WAIT)
        assert unary.sequence == 2
        alice.close()
        bob.close()


class RefusingStream:
    """A session stream the server refuses before taking anything up, with `code`."""

    def __init__(self, code: grpc.StatusCode) -> None:
        self.code = code
        self.calls = 0

    def call(self, kind: str, message: object, timeout: float) -> object:
        self.calls += 1
        raise StreamRefused(self.code, "refused")

    def close(self) -> None:
        pass


@pytest.mark.parametrize("code", [grpc.StatusCode.UNIMPLEMENTED,
                                  grpc.StatusCode.RESOURCE_EXHAUSTED])
def test_a_refused_stream_has_the_client_send_its_calls_unary(
    released_server: RunningServer, code: grpc.StatusCode,
) -> None:
    first = snapshot()
    with grpc.insecure_channel(released_server.target) as channel:
        refusing = RefusingStream(code)
        session = DispatchSession(pb_grpc.SessionServiceStub(channel), WAIT,
                                  stream=refusing)  # type: ignore[arg-type]
        states = []
        for step in range(3):
            state = pb.DispatchRequest()
            state.CopyFrom(first)
            state.time = first.time + 60 * step
            states.append(state)
        session.decide(states[0])
        session.decide(states[1])
        assert (session.opens, session.deltas) == (1, 1)  # answered, unary
        assert refusing.calls == 1  # refused once: not asked again for this session
        if code == grpc.StatusCode.UNIMPLEMENTED:
            assert session.stream is None  # a server without streams: unary from now on
        else:
            session.close()  # the next session tries the stream again
            session.decide(states[2])
            assert refusing.calls == 2 and session.stream is refusing
