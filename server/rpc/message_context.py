"""One message of a session stream seen as a unary call: the ServicerContext its call runs with.

A stream's message is answered by the very code that answers its unary call (SessionServicer's
OpenSession / UpdateSession / CloseSession, DispatcherService's ReportCompletions), so the
checks, the session rules and the decision front are the same. That code ends a call with
`context.abort(...)` / `abort_with_status(...)`; here those raise `CallAborted`, which the
stream turns into the message's `error` answer instead of ending the stream. The deadline is
the message's own (`timeout_ms`, from when the stream takes it up) within the stream's, and
past it the call is no longer active, as a unary call past its deadline (its decision stops,
and is answered DEADLINE_EXCEEDED); the caller's presence, identity and metadata are the
stream's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NoReturn

import grpc

from .thread_context import CallAborted, status_from, status_of


class MessageContext(grpc.ServicerContext):
    """The context of one stream message's call (module doc): `stream` is the stream's
    context as the message's thread sees it (server/rpc/thread_context.py)."""

    def __init__(self, stream: grpc.ServicerContext, timeout_ms: int, taken_up: float) -> None:
        self.stream = stream
        self.deadline = taken_up + timeout_ms / 1000 if timeout_ms > 0 else None

    # -- what differs from the stream's context ----------------------------------------------

    # grpc returns None without a deadline, where its stubs say float (callers check for it).
    def time_remaining(self) -> float | None:  # type: ignore[override]
        """Seconds left of the message's deadline or the stream's, whichever comes first."""
        stream_left = self.stream.time_remaining()
        if self.deadline is None:
            return stream_left
        own_left = max(0.0, self.deadline - time.monotonic())
        return own_left if stream_left is None else min(own_left, stream_left)

    def is_active(self) -> bool:
        """The stream is, and the message's deadline has not passed: past it, the message's
        call is over, as a unary call is at its deadline (a decision for it stops)."""
        return self.stream.is_active() and not (
            self.deadline is not None and time.monotonic() >= self.deadline)

    def abort(self, code: grpc.StatusCode, details: str) -> NoReturn:
        if code == grpc.StatusCode.CANCELLED and self.stream.is_active():
            # Not the caller leaving (the stream goes on): the message's deadline passing.
            code = grpc.StatusCode.DEADLINE_EXCEEDED
            details = f"past the message's deadline: {details}"
        raise CallAborted(status_of(code, details))

    def abort_with_status(self, status: grpc.Status) -> NoReturn:
        raise CallAborted(status_from(status))

    # The status and metadata of a message travel in its answer, not in the stream's.
    def set_code(self, code: grpc.StatusCode) -> None:
        pass

    def set_details(self, details: str) -> None:
        pass

    def set_trailing_metadata(self, trailing_metadata: Any) -> None:
        pass

    def send_initial_metadata(self, initial_metadata: Any) -> None:
        pass

    # -- the stream's -------------------------------------------------------------------------

    def cancel(self) -> None:
        self.stream.cancel()

    def add_callback(self, callback: Callable[[], None]) -> bool:
        return self.stream.add_callback(callback)

    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return self.stream.invocation_metadata()

    def peer(self) -> str:
        return self.stream.peer()

    def peer_identities(self) -> Any:
        return self.stream.peer_identities()

    def peer_identity_key(self) -> str | None:
        return self.stream.peer_identity_key()

    def auth_context(self) -> Any:
        return self.stream.auth_context()
