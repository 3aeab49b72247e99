"""Issue #22, case 4 through a real mTLS server on loopback: a session answers only the identity
that opened it, no caller can evict another's sessions, and logs never carry a session id."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import structlog

from hpcdispatch.client import channel_credentials
from hpcdispatch.client.session import session_failure as _reason
from hpcdispatch.server.logging_config import configure_logging
from hpcdispatch.server.rpc.app import RunningServer
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc
from tests.certificates import two_client_pki
from tests.observability import metrics_server, small_request

MAX_SESSIONS = 6


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return two_client_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def log_stream() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    configure_logging("json", "info", stream=stream)
    yield stream
    structlog.reset_defaults()


@pytest.fixture(scope="module")
def server(pki: dict[str, Path], log_stream: io.StringIO) -> Iterator[RunningServer]:
    with metrics_server(tls_cert=str(pki["server_cert"]), tls_key=str(pki["server_key"]),
                        tls_client_ca=str(pki["ca"]), tls_client_identities=("alice", "bob"),
                        max_sessions=MAX_SESSIONS, workers=3) as running:
        yield running


def stub_of(server: RunningServer, pki: dict[str, Path], who: str) -> pb_grpc.SessionServiceStub:
    credentials = channel_credentials(pki["ca"], pki[f"{who}_cert"], pki[f"{who}_key"])
    channel = grpc.secure_channel(server.target, credentials)
    return pb_grpc.SessionServiceStub(channel)


def open_session(stub: pb_grpc.SessionServiceStub, decide: bool = False) -> str:
    request = pb.OpenSessionRequest(snapshot=small_request(), decide=decide)
    return stub.OpenSession(request, timeout=30).session_id


def no_change(session_id: str, sequence: int = 1, decide: bool = False) -> pb.UpdateSessionRequest:
    return pb.UpdateSessionRequest(session_id=session_id, sequence=sequence,
                                   time=small_request().time, decide=decide)


def test_another_identity_cannot_read_change_or_close_a_session(
    server: RunningServer, pki: dict[str, Path],
) -> None:
    alice, bob = stub_of(server, pki, "alice"), stub_of(server, pki, "bob")
    session = open_session(alice)
    unknown = session[:9] + "0" * 32  # of this server, never opened
    answers = []
    for session_id in (session, unknown):  # Bob's answer must not tell the two apart
        with pytest.raises(grpc.RpcError) as caught:
            bob.UpdateSession(no_change(session_id, decide=True), timeout=30)
        answers.append(caught.value)
    codes = {a.code() for a in answers}  # type: ignore[attr-defined]
    assert codes == {grpc.StatusCode.FAILED_PRECONDITION}
    assert [_reason(a) for a in answers] == ["UNKNOWN_SESSION", "UNKNOWN_SESSION"]
    assert all(a.details().startswith("no session ") for a in answers)  # type: ignore[attr-defined]
    bob.CloseSession(pb.CloseSessionRequest(session_id=session), timeout=30)  # does nothing
    assert alice.UpdateSession(no_change(session), timeout=30).sequence == 1


def test_a_caller_opening_many_sessions_evicts_only_its_own(
    server: RunningServer, pki: dict[str, Path],
) -> None:
    """Before: any caller evicted everyone's sessions by opening max_sessions of its own."""
    alice, bob = stub_of(server, pki, "alice"), stub_of(server, pki, "bob")
    kept = open_session(alice)
    bobs = [open_session(bob) for _ in range(MAX_SESSIONS + 2)]
    assert alice.UpdateSession(no_change(kept), timeout=30).sequence == 1
    with pytest.raises(grpc.RpcError) as caught:  # Bob's oldest went, to Bob's own later ones
        bob.UpdateSession(no_change(bobs[0]), timeout=30)
    assert _reason(caught.value) == "SESSION_EXPIRED"  # type: ignore[arg-type]
    assert bob.UpdateSession(no_change(bobs[-1]), timeout=30).sequence == 1


def test_session_ids_are_secrets_kept_out_of_the_logs(
    server: RunningServer, pki: dict[str, Path], log_stream: io.StringIO,
) -> None:
    alice = stub_of(server, pki, "alice")
    session = open_session(alice, decide=True)
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{32}", session)  # 128 random bits after the dash
    alice.UpdateSession(no_change(session, decide=True), timeout=30)
    with pytest.raises(grpc.RpcError):
        alice.UpdateSession(no_change(session, sequence=5), timeout=30)  # a sequence gap
    alice.CloseSession(pb.CloseSessionRequest(session_id=session), timeout=30)
    logged = log_stream.getvalue()
    assert '"session opened"' in logged and '"session closed"' in logged
    assert session not in logged and session.split("-")[1][:12] not in logged
