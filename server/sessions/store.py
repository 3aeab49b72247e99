"""The server's sessions: each owned by the identity that opened it, at most `max_sessions` in
all and `max_per_owner` per identity, each forgotten after `idle_seconds` unused.

Session ids carry this server instance's id, so a session opened before a restart is told apart
from one that never existed (SERVER_RESTARTED vs UNKNOWN_SESSION), and the ids of recently
expired or evicted sessions are remembered (SESSION_EXPIRED), as are those forgotten after an
internal error on their state (INTERNAL_ERROR, `forget_failed`). The rest of an id is a secret of
128 random bits: without client certificates (every caller is the same identity, "") knowing
the id is what makes a caller the session's owner, so ids are never logged, only their `tag`.

A session answers its owner only: another identity naming it gets what an unknown id gets
(UNKNOWN_SESSION; closing it does nothing), so it learns nothing of it. Opening a session
evicts, when the owner already holds `max_per_owner`, the owner's own least recently used
session; otherwise, when the server holds `max_sessions`, the least recently used session of
the identity holding the most (the opener's own when it holds as many as any other): no caller
can take another below an equal share. An evicted session's caller resyncs on its next call.
A session is stored only once it can be answered: OpenSession opens it after its decision, so a
refused or abandoned OpenSession creates and evicts nothing.

Calls on one session run one at a time, calls on different sessions in parallel. A call does
not wait for the session: while another call holds it (checking a delta, waiting for a
decision slot, deciding), `Session.exclusive` refuses at once (SessionBusy), so calls on one
busy session never hold the server's threads, and never enter the decision slots' queue.
"""

from __future__ import annotations

import re
import secrets
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from hpcdispatch.catalog import session_tag

from .heap import freeze_long_lived
from .resend import LastDelta
from .state import SessionState

# Ids of expired, evicted or failed sessions remembered to answer SESSION_EXPIRED (or
# INTERNAL_ERROR for a failed one).
REMEMBERED_EXPIRED = 10_000
# Why a session forgotten after an internal error on its state was (`forget_failed`).
FAILED = "failed"
# "<server instance>-<session secret>", both hex: 8 and 32 digits (24 before issue #22).
SESSION_ID = re.compile(r"[0-9a-f]{8}-(?:[0-9a-f]{24}|[0-9a-f]{32})")
SECRET_BYTES = 16


@dataclass(slots=True)
class Session:
    id: str
    state: SessionState
    used: float  # time.monotonic() of the last call
    owner: str = ""  # the identity that opened it ("" without client certificates)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # The delta of the current sequence number (resend.py), with the edge's answer.
    last: LastDelta[Any] | None = None

    @property
    def tag(self) -> str:
        return session_tag(self.id)

    @contextmanager
    def exclusive(self) -> Iterator[SessionState]:
        """The session's state for one call; SessionBusy at once while another call has it."""
        if not self.lock.acquire(blocking=False):
            raise SessionBusy(f"session {self.tag} is busy with another call (a delta being "
                              "checked or decided); call again once that one has answered")
        try:
            yield self.state
        finally:
            self.lock.release()


class SessionBusy(Exception):
    """Another call on the session is in progress."""


class GoneReason(Enum):
    """Why a session id names no live session of the caller (the edge answers each with its
    SessionFailure of the contract)."""

    EXPIRED = "expired"  # expired or evicted (remembered: REMEMBERED_EXPIRED)
    SERVER_RESTARTED = "server_restarted"  # opened by an earlier instance of the server
    UNKNOWN = "unknown"  # never opened, another identity's, or long forgotten
    INTERNAL_ERROR = "internal_error"  # forgotten after an internal error: resync in full


class SessionGone(Exception):
    """The session id names no live session of the caller, for `reason`."""

    def __init__(self, reason: GoneReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class SessionStore:
    """Live sessions by id, least recently used first (thread-safe)."""

    def __init__(
        self, max_sessions: int, idle_seconds: float,
        clock: Callable[[], float] = time.monotonic,
        on_forget: Callable[[str], None] | None = None,
        max_per_owner: int | None = None,
    ) -> None:
        """`max_per_owner`: sessions one identity may hold (None: `max_sessions`); the
        identity "" (no client certificate) may always hold `max_sessions`."""
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1, got {max_sessions}")
        self.max_sessions = max_sessions
        self.max_per_owner = max_sessions if max_per_owner is None else max_per_owner
        if self.max_per_owner < 1:
            raise ValueError(f"max_per_owner must be >= 1, got {max_per_owner}")
        self.idle_seconds = idle_seconds
        self.clock = clock
        self.instance = secrets.token_hex(4)  # this server process
        self.on_forget = on_forget  # called with "expired", "evicted" or FAILED
        self._sessions: OrderedDict[str, Session] = OrderedDict()
        self._owned: Counter[str] = Counter()  # sessions held per owner
        self._expired: OrderedDict[str, tuple[str, str]] = OrderedDict()  # id -> (owner, why)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def held_by(self, owner: str) -> int:
        with self._lock:
            return self._owned[owner]

    def open(self, state: SessionState, owner: str = "") -> Session:
        session_id = f"{self.instance}-{secrets.token_hex(SECRET_BYTES)}"
        session = Session(session_id, state, self.clock(), owner)
        with self._lock:
            self._expire_idle()
            cap = self.max_sessions if owner == "" else self.max_per_owner
            while self._owned[owner] >= cap:
                self._evict(owner)
            while len(self._sessions) >= self.max_sessions:
                self._evict(self._fullest(owner))
            self._sessions[session.id] = session
            self._owned[owner] += 1
        freeze_long_lived()  # the session's state lives as long as it: out of collections
        return session

    def get(self, session_id: str, owner: str = "") -> Session:
        """The live session of `owner`; raises SessionGone (UNKNOWN_SESSION for another's)."""
        with self._lock:
            self._expire_idle()
            session = self._sessions.get(session_id)
            if session is not None and session.owner == owner:
                session.used = self.clock()
                self._sessions.move_to_end(session_id)
                return session
            gone = self._expired.get(session_id) if session is None else None
            if gone is not None and gone[0] == owner:
                if gone[1] == FAILED:
                    raise SessionGone(GoneReason.INTERNAL_ERROR,
                                      f"session {session_tag(session_id)} was forgotten after "
                                      "an internal error of the server")
                raise SessionGone(GoneReason.EXPIRED,
                                  f"session {session_tag(session_id)} expired or was evicted")
        if (session is None and SESSION_ID.fullmatch(session_id)
                and not session_id.startswith(self.instance)):
            raise SessionGone(GoneReason.SERVER_RESTARTED,
                              f"session {session_tag(session_id)} was opened before this "
                              "server started")
        raise SessionGone(GoneReason.UNKNOWN,
                          f"no session {session_tag(session_id)}")

    def close(self, session_id: str, owner: str = "") -> bool:
        """Forget `owner`'s session; another's (or an unknown one) stays as it is: False."""
        with self._lock:
            session = self._sessions.get(session_id)
            if session is None or session.owner != owner:
                return False
            self._drop(session_id)
            return True

    def forget_failed(self, session: Session) -> None:
        """Forget `session` after an internal error on its state (a later call naming it is
        told so: INTERNAL_ERROR, a resync)."""
        with self._lock:
            if self._sessions.get(session.id) is session:
                self._drop(session.id)
                self._remember(session.id, session.owner, FAILED)

    def _fullest(self, opener: str) -> str:
        """The owner to evict from when the server is full: the one holding the most
        sessions, the opener among the candidates first (lock held)."""
        most = max(self._owned.values())
        return opener if self._owned[opener] == most else next(
            owner for owner, held in self._owned.items() if held == most)

    def _evict(self, owner: str) -> None:
        """Forget `owner`'s least recently used session (lock held)."""
        victim = next(s.id for s in self._sessions.values() if s.owner == owner)
        self._drop(victim)
        self._remember(victim, owner, "evicted")

    def _drop(self, session_id: str) -> None:
        session = self._sessions.pop(session_id)
        self._owned[session.owner] -= 1
        if not self._owned[session.owner]:
            del self._owned[session.owner]

    def _expire_idle(self) -> None:
        """Forget sessions unused for idle_seconds (caller holds the lock)."""
        horizon = self.clock() - self.idle_seconds
        while self._sessions:
            oldest_id, oldest = next(iter(self._sessions.items()))
            if oldest.used > horizon:
                break
            self._drop(oldest_id)
            self._remember(oldest_id, oldest.owner, "expired")

    def _remember(self, session_id: str, owner: str, why: str) -> None:
        self._expired[session_id] = (owner, why)
        while len(self._expired) > REMEMBERED_EXPIRED:
            self._expired.popitem(last=False)
        if self.on_forget is not None:
            self.on_forget(why)
