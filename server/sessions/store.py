"""The server's sessions: at most `max_sessions`, each forgotten after `idle_seconds` unused.

Session ids carry this server instance's id, so a session opened before a restart is told apart
from one that never existed (SERVER_RESTARTED vs UNKNOWN_SESSION), and the ids of recently
expired or evicted sessions are remembered (SESSION_EXPIRED). Opening a session beyond the bound
evicts the least recently used one; its caller resyncs on its next call. Each session has its
own lock: calls on one session run one at a time, calls on different sessions in parallel.
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

from hpcdispatch.v1 import dispatcher_pb2 as pb

from .state import SessionState

# Ids of expired or evicted sessions remembered to answer SESSION_EXPIRED.
REMEMBERED_EXPIRED = 10_000
# "<server instance>-<session>", both hex: 8 and 24 digits.
SESSION_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{24}")


@dataclass(slots=True)
class Session:
    id: str
    state: SessionState
    used: float  # time.monotonic() of the last call
    lock: threading.Lock = field(default_factory=threading.Lock)


class SessionGone(Exception):
    """The session id names no live session; `reason` is a pb.SessionFailure."""

    def __init__(self, reason: int, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class SessionStore:
    """Live sessions by id, least recently used first (thread-safe)."""

    def __init__(
        self, max_sessions: int, idle_seconds: float,
        clock: Callable[[], float] = time.monotonic,
        on_forget: Callable[[str], None] | None = None,
    ) -> None:
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1, got {max_sessions}")
        self.max_sessions = max_sessions
        self.idle_seconds = idle_seconds
        self.clock = clock
        self.instance = secrets.token_hex(4)  # this server process
        self.on_forget = on_forget  # called with "expired" or "evicted"
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._expired: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def open(self, state: SessionState) -> Session:
        session = Session(f"{self.instance}-{secrets.token_hex(12)}", state, self.clock())
        with self._lock:
            self._expire_idle()
            while len(self._sessions) >= self.max_sessions:
                old_id, _ = self._sessions.popitem(last=False)
                self._remember(old_id, "evicted")
            self._sessions[session.id] = session
        return session

    def get(self, session_id: str) -> Session:
        """The live session; raises SessionGone."""
        with self._lock:
            self._expire_idle()
            session = self._sessions.get(session_id)
            if session is not None:
                session.used = self.clock()
                self._sessions.move_to_end(session_id)
                return session
            if session_id in self._expired:
                raise SessionGone(pb.SESSION_FAILURE_SESSION_EXPIRED,
                                  f"session {session_id!r} expired or was evicted")
        if SESSION_ID.fullmatch(session_id) and not session_id.startswith(self.instance):
            raise SessionGone(pb.SESSION_FAILURE_SERVER_RESTARTED,
                              f"session {session_id!r} was opened before this server started")
        raise SessionGone(pb.SESSION_FAILURE_UNKNOWN_SESSION, f"no session {session_id!r}")

    def close(self, session_id: str) -> bool:
        with self._lock:
            return self._sessions.pop(session_id, None) is not None

    def _expire_idle(self) -> None:
        """Forget sessions unused for idle_seconds (caller holds the lock)."""
        horizon = self.clock() - self.idle_seconds
        while self._sessions:
            oldest_id, oldest = next(iter(self._sessions.items()))
            if oldest.used > horizon:
                break
            del self._sessions[oldest_id]
            self._remember(oldest_id, "expired")

    def _remember(self, session_id: str, why: str) -> None:
        self._expired[session_id] = None
        while len(self._expired) > REMEMBERED_EXPIRED:
            self._expired.popitem(last=False)
        if self.on_forget is not None:
            self.on_forget(why)
