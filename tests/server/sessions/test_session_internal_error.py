"""An internal error of the server on a session's state (issue #51, item 2), through a real gRPC
server on loopback: logged once with its traceback, the session forgotten, and the call (and any
later one naming the session) answered FAILED_PRECONDITION with the reason INTERNAL_ERROR and a
message that says to resync with a full snapshot, never UNKNOWN; the client's session resyncs
on it by itself, over unary calls and over a stream.

The error is a bug planted in the session's state for one call (`SessionState.occupancy`
raises IndexError, as a pool broken in place once made it): every verdict is an answer, a
counter or a log line.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
import structlog

from hpcdispatch.client import DispatcherClient
from hpcdispatch.server.logging_config import configure_logging
from hpcdispatch.server.rpc.app import RunningServer
from hpcdispatch.server.sessions.state import SessionState
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc
from tests.server.sessions.test_session_calls import WAIT, delta, error_info, metric, snapshot

FAILED = "session failed on an internal error; forgotten, its caller resyncs"


@pytest.fixture
def log_lines() -> Iterator[Callable[[], list[dict[str, Any]]]]:
    """The server's JSON log lines, as `serve` configures them (server/logging_config.py)."""
    stream = io.StringIO()
    configure_logging("json", "info", stream=stream)
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines() if line]
    structlog.reset_defaults()


@pytest.fixture
def bug_once(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """`bug_once()`: the next decision on a session's state fails with an IndexError."""
    real = SessionState.occupancy
    armed = [False]

    def occupancy(self: SessionState, *args: Any, **kwargs: Any) -> Any:
        if armed[0]:
            armed[0] = False
            raise IndexError("a bug planted in the session's state")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SessionState, "occupancy", occupancy)
    return lambda: armed.__setitem__(0, True)


def failure(call: Callable[[], object]) -> tuple[grpc.StatusCode, str, str]:
    """(code, ErrorInfo reason, message) of the error `call` ends in."""
    with pytest.raises(grpc.RpcError) as raised:
        call()
    error = raised.value
    return error.code(), error_info(error).reason, error.details()  # type: ignore[attr-defined]


def test_an_internal_error_forgets_the_session_and_asks_for_a_full_snapshot(
    serve: Callable[..., RunningServer], bug_once: Callable[[], None],
    log_lines: Callable[[], list[dict[str, Any]]],
) -> None:
    server = serve(workers=4)
    request = snapshot()
    with grpc.insecure_channel(server.target) as channel:
        stub = pb_grpc.SessionServiceStub(channel)
        session_id = stub.OpenSession(pb.OpenSessionRequest(snapshot=request, decide=True),
                                      timeout=WAIT).session_id
        bug_once()
        first = failure(lambda: stub.UpdateSession(delta(session_id, 1, request.time),
                                                   timeout=WAIT))
        # The next call, on a fine server, still hears what happened (not UNKNOWN_SESSION).
        again = failure(lambda: stub.UpdateSession(delta(session_id, 1, request.time),
                                                   timeout=WAIT))
        later = stub.OpenSession(pb.OpenSessionRequest(snapshot=request, decide=True),
                                 timeout=WAIT)
        assert stub.UpdateSession(delta(later.session_id, 1, request.time),
                                  timeout=WAIT).decision.time == request.time
    for code, reason, message in (first, again):
        assert code == grpc.StatusCode.FAILED_PRECONDITION
        assert reason == "INTERNAL_ERROR"
        assert "full snapshot" in message
    assert "IndexError" in first[2]
    assert metric(server, "hpcdispatch_session_failures_total", reason="internal_error") == 2
    assert metric(server, "hpcdispatch_sessions_forgotten_total", why="failed") == 1
    failed = [line for line in log_lines() if line["event"] == FAILED]
    assert len(failed) == 1  # once, with its traceback
    assert failed[0]["level"] == "error"
    trace = json.dumps(failed[0]["exception"])
    assert "IndexError" in trace and "a bug planted in the session's state" in trace
    assert "occupancy" in trace  # the frame it came from


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_the_client_session_resyncs_on_an_internal_error(
    serve: Callable[..., RunningServer], bug_once: Callable[[], None], stream: bool,
) -> None:
    server = serve(workers=4)
    first, second, third = snapshot(), snapshot(), snapshot()
    second.time, third.time = first.time + 60, first.time + 120
    with DispatcherClient(server.target, timeout=WAIT) as client:
        session = client.session(stream=stream)
        session.decide(first)
        bug_once()
        answer = session.decide(second)  # resynced: opened again with the whole snapshot
        assert list(answer.starts) == list(client.dispatch(second).starts)
        assert (session.resyncs, dict(session.reasons)) == (1, {"INTERNAL_ERROR": 1})
        assert session.decide(third).time == third.time  # and on a delta again
        assert (session.opens, session.deltas) == (2, 1)
        session.close()
