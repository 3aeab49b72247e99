"""A call's asyncio context seen from the thread that does its work (server/rpc/call_pool.py).

The servicers' code is synchronous: it runs in a pool thread, with the ServicerContext of
grpc's synchronous API, while the call itself lives on the server's event loop. `ThreadContext`
is that context: it reads the call's deadline, caller and identity from the asyncio context,
and `abort(...)` / `abort_with_status(...)` raise `CallAborted`, which the loop turns into the
call's status (its google.rpc details included). The call is no longer active once the loop
has seen it end (the caller cancelled it, its deadline passed, the server stopped), so the work
in the thread stops as it would on a synchronous server.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

import grpc
from google.rpc import status_pb2

# Where grpc-status carries the serialized google.rpc.Status (grpcio-status's key).
STATUS_DETAILS_KEY = "grpc-status-details-bin"
CODE_BY_VALUE = {code.value[0]: code for code in grpc.StatusCode}


class CallAborted(Exception):
    """The call (or a stream message's call) ended with an error: `status` (google.rpc)."""

    def __init__(self, status: status_pb2.Status) -> None:
        super().__init__(status.message)
        self.status = status


def status_of(code: grpc.StatusCode, message: str) -> status_pb2.Status:
    return status_pb2.Status(code=code.value[0], message=message)


def code_of(status: status_pb2.Status) -> grpc.StatusCode:
    return CODE_BY_VALUE.get(status.code, grpc.StatusCode.UNKNOWN)


def status_from(status: grpc.Status) -> status_pb2.Status:
    """The google.rpc.Status a grpc.Status carries (grpcio-status puts it in the trailing
    metadata), or one of its code and details."""
    for key, value in status.trailing_metadata or ():
        if key == STATUS_DETAILS_KEY and isinstance(value, bytes):
            return status_pb2.Status.FromString(value)
    return status_of(status.code, status.details)


def trailing_metadata_of(status: status_pb2.Status) -> tuple[tuple[str, bytes], ...]:
    """The trailing metadata that carries `status`'s details (none without details)."""
    if not status.details:
        return ()
    return ((STATUS_DETAILS_KEY, status.SerializeToString()),)


class ThreadContext(grpc.ServicerContext):
    """The synchronous view of one call's asyncio context (module doc)."""

    def __init__(self, call: Any) -> None:
        """`call`: the grpc.aio.ServicerContext of the call."""
        self.call = call
        self.ended = False  # set on the loop once the call is over (cancelled, past, stopped)
        self._auth: Any = None  # the call's auth context, read once: its handshake's

    def time_remaining(self) -> float | None:  # type: ignore[override]
        left: float | None = self.call.time_remaining()
        return left

    def is_active(self) -> bool:
        return not self.ended and not self.call.done()

    def abort(self, code: grpc.StatusCode, details: str) -> NoReturn:
        raise CallAborted(status_of(code, details))

    def abort_with_status(self, status: grpc.Status) -> NoReturn:
        raise CallAborted(status_from(status))

    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return tuple(self.call.invocation_metadata() or ())

    def peer(self) -> str:
        peer: str = self.call.peer()
        return peer

    def peer_identities(self) -> Any:
        return self.call.peer_identities()

    def peer_identity_key(self) -> str | None:
        key: str | None = self.call.peer_identity_key()
        return key

    def auth_context(self) -> Any:
        if self._auth is None:  # (each stream message's call asks for it, and the slot too)
            self._auth = self.call.auth_context()
        return self._auth

    # What only the loop may do with the call (its metadata and status go out from there).
    def _on_the_loop(self, what: str) -> NoReturn:
        raise NotImplementedError(f"{what} is done on the event loop, not in the call's thread")

    def set_code(self, code: grpc.StatusCode) -> None:
        self._on_the_loop("set_code")

    def set_details(self, details: str) -> None:
        self._on_the_loop("set_details")

    def set_trailing_metadata(self, trailing_metadata: Any) -> None:
        self._on_the_loop("set_trailing_metadata")

    def send_initial_metadata(self, initial_metadata: Any) -> None:
        self._on_the_loop("send_initial_metadata")

    def cancel(self) -> None:
        self._on_the_loop("cancel")

    def add_callback(self, callback: Callable[[], None]) -> bool:
        self._on_the_loop("add_callback")
