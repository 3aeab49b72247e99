"""Idle session streams cost no decision thread (issue #43, item 1), through a real gRPC server
on loopback.

A stream takes a pool thread, and a decision thread, only while one of its messages is answered:
streams that sent a message and then wait leave every decision to the other callers, whoever
they are (plaintext, or another mTLS identity). A stream that stays silent for
`stream_idle_seconds` is ended by the server, UNAVAILABLE saying why, and the client starts a
new one at its next call; the sessions are kept. Every verdict is an event (an answer, a status,
a counter): WAIT only bounds the waiting, and is reached only when the behaviour is broken.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from hpcdispatch.client import DispatcherClient, channel_credentials
from hpcdispatch.server.rpc.app import RunningServer
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc
from tests.certificates import two_client_pki
from tests.instances import Held
from tests.server.sessions.test_session_calls import WAIT, delta, metric, snapshot, wait_for
from tests.server.sessions.test_session_stream import RawStream, opened

# Dispatch calls sent one after the other beside the idle streams: more than the decision
# threads (workers - 1 = 3), so that none of them is answered on a thread the streams left.
CALLS = 6


def idle_streams(channel: grpc.Channel, count: int = 3) -> list[RawStream]:
    """`count` streams that each opened a session (one message answered) and now wait."""
    streams = [RawStream(channel) for _ in range(count)]
    for stream in streams:
        opened(stream)
    return streams


def answered_beside_them(channel: grpc.Channel, server: RunningServer) -> None:
    """Dispatch calls one after the other, a deciding OpenSession and a new stream's decision
    are each answered (raw stubs: no retries hide a refusal), and health says SERVING."""
    dispatcher = pb_grpc.DispatcherServiceStub(channel)
    for call in range(CALLS):
        request = snapshot(seed=call + 1)
        assert dispatcher.Dispatch(request, timeout=WAIT).time == request.time
    opened_now = pb_grpc.SessionServiceStub(channel).OpenSession(
        pb.OpenSessionRequest(snapshot=snapshot(), decide=True), timeout=WAIT)
    assert opened_now.decision.time == snapshot().time
    fresh = RawStream(channel)
    decided = fresh.ask(open=pb.OpenSessionRequest(snapshot=snapshot(), decide=True))
    assert decided.WhichOneof("answer") == "opened", decided
    fresh.close()
    for service in ("", "hpcdispatch.v1.DispatcherService"):
        assert health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=WAIT
        ).status == health_pb2.HealthCheckResponse.SERVING
    assert metric(server, "hpcdispatch_decisions_refused_total", reason="threads") == 0


def test_three_idle_streams_leave_every_decision_to_the_other_callers(
    held: Held, serve: Callable[..., RunningServer],
) -> None:
    held.release.set()
    server = serve(workers=4)  # the default: 3 decision threads
    with grpc.insecure_channel(server.target) as channel:
        streams = idle_streams(channel)
        assert metric(server, "hpcdispatch_session_streams_open") == 3
        answered_beside_them(channel, server)
        # The idle streams go on as before: each answers its next message.
        for stream in streams:
            assert stream.ask(close=pb.CloseSessionRequest(session_id="x")).HasField("closed")
            stream.close()
            assert list(stream.call) == []


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return two_client_pki(tmp_path_factory.mktemp("pki"))


def mtls_channel(server: RunningServer, pki: dict[str, Path], who: str) -> grpc.Channel:
    return grpc.secure_channel(f"localhost:{server.port}", channel_credentials(
        pki["ca"], pki[f"{who}_cert"], pki[f"{who}_key"]))


def test_one_identitys_idle_streams_leave_another_identity_every_decision(
    held: Held, serve: Callable[..., RunningServer], pki: dict[str, Path],
) -> None:
    held.release.set()
    server = serve(workers=4, tls_cert=str(pki["server_cert"]), tls_key=str(pki["server_key"]),
                   tls_client_ca=str(pki["ca"]), tls_client_identities=("alice", "bob"))
    with mtls_channel(server, pki, "bob") as bob, mtls_channel(server, pki, "alice") as alice:
        streams = idle_streams(bob)
        answered_beside_them(alice, server)
        for stream in streams:
            stream.close()
            assert list(stream.call) == []  # ended OK once the server has answered all


# -- the idle limit --------------------------------------------------------------------------


def test_a_silent_stream_is_ended_unavailable_and_its_sessions_are_kept(
    held: Held, serve: Callable[..., RunningServer],
) -> None:
    held.release.set()
    server = serve(stream_idle_seconds=1.0)
    first = snapshot()
    with grpc.insecure_channel(server.target) as channel:
        sessions = pb_grpc.SessionServiceStub(channel)
        session_id = sessions.OpenSession(pb.OpenSessionRequest(snapshot=first),
                                          timeout=WAIT).session_id
        silent = RawStream(channel)  # sends nothing
        with pytest.raises(grpc.RpcError) as ended:
            silent.answer()
        assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "stream_idle_seconds" in (ended.value.details() or "")
        silent.close()
        assert metric(server, "hpcdispatch_session_streams_idle_ended_total") == 1
        wait_for(lambda: metric(server, "hpcdispatch_session_streams_open") == 0,
                 "the ended stream is no longer counted open")
        # The session is kept: its next delta is taken, unary or on a new stream.
        assert sessions.UpdateSession(delta(session_id, 1, first.time, decide=False),
                                      timeout=WAIT).sequence == 1
        again = RawStream(channel)
        assert again.ask(update=delta(session_id, 2, first.time, decide=False)).updated \
            .sequence == 2
        again.close()


def test_the_client_goes_on_on_a_new_stream_after_the_server_ended_an_idle_one(
    held: Held, serve: Callable[..., RunningServer],
) -> None:
    held.release.set()
    server = serve(stream_idle_seconds=1.0)
    first = snapshot()
    with DispatcherClient(server.target, timeout=WAIT) as client:
        session = client.session()
        assert session.stream is not None
        assert session.decide(first).time == first.time
        wait_for(lambda: metric(server, "hpcdispatch_session_streams_idle_ended_total") == 1,
                 "the server ended the idle stream")
        later = pb.DispatchRequest()
        later.CopyFrom(first)
        later.time = first.time + 60
        assert session.decide(later).time == later.time  # on a new stream, same session
        assert session.stream.streams == 2
        assert (session.opens, session.deltas, session.resyncs) == (1, 1, 0)
        session.close()
