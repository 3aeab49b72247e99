"""Graceful stop: health NOT_SERVING, new decisions refused, decisions in flight finish.

grpc's `server.stop(grace)` refuses every new call at once, health checks included, so a probe
would see UNAVAILABLE rather than NOT_SERVING. Stopping is therefore two steps: first *drain*
(the server keeps answering; health says NOT_SERVING; a new `Dispatch` is answered UNAVAILABLE
so that the client sends it to another instance; the other calls are still served) until no
DispatcherService call is in flight or the grace period ends; then `server.stop`.

A session stream is refused while draining when it starts; once open, it is counted in flight
only while it answers a message (server/rpc/session_stream.py enters and leaves per message), so
an idle stream does not hold a stop back, and a stream ends UNAVAILABLE before it takes up a
message while draining. `server.stop` then ends the idle streams that are still open.

Everything here is non-blocking but `wait_idle`: the interceptor and the streams count calls
on the server's event loop, and a stop waits for them from its own thread.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import grpc

from hpcdispatch.v1 import dispatcher_pb2 as pb

from .rpc_wrap import BIDI_STREAM, SERVER_STREAM, Around, AroundInterceptor, split_method

DISPATCHER_SERVICE = pb.DESCRIPTOR.services_by_name["DispatcherService"].full_name
SESSION_SERVICE = pb.DESCRIPTOR.services_by_name["SessionService"].full_name
REFUSED_WHILE_DRAINING = frozenset({"Dispatch", "OpenSession", "UpdateSession",
                                    "StreamSession"})
SHUTTING_DOWN = ("the server is shutting down (health NOT_SERVING): send the request to another "
                 "instance")


class Drain:
    """In-flight DispatcherService calls, and whether the server is draining."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._in_flight = 0
        self._draining = False

    @property
    def in_flight(self) -> int:
        with self._changed:
            return self._in_flight

    @property
    def draining(self) -> bool:
        with self._changed:
            return self._draining

    def enter(self, refuse_when_draining: bool) -> bool:
        """Count a call in; False (not counted) when draining refuses it."""
        with self._changed:
            if self._draining and refuse_when_draining:
                return False
            self._in_flight += 1
            return True

    def leave(self) -> None:
        with self._changed:
            self._in_flight -= 1
            self._changed.notify_all()

    def start(self) -> None:
        """From now on new decisions are refused."""
        with self._changed:
            self._draining = True

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no call is in flight, at most `timeout` seconds; True if none is left."""
        with self._changed:
            return self._changed.wait_for(lambda: self._in_flight == 0, timeout=timeout)

    def interceptor(self) -> DrainInterceptor:
        return DrainInterceptor(self)


class DrainInterceptor(AroundInterceptor):
    """Counts DispatcherService and SessionService calls in flight (a stream counts each of
    its messages itself, server/rpc/session_stream.py); refuses new decisions while
    draining."""

    def __init__(self, drain: Drain) -> None:
        self.drain = drain

    def around_for(self, details: grpc.HandlerCallDetails,
                   handler: grpc.RpcMethodHandler) -> Around | None:
        service, method = split_method(details.method)
        if service not in (DISPATCHER_SERVICE, SESSION_SERVICE):
            return None
        refused = method in REFUSED_WHILE_DRAINING
        drain = self.drain

        @asynccontextmanager
        async def around(kind: str, request: Any, context: Any) -> AsyncIterator[Any]:
            streams = kind in (SERVER_STREAM, BIDI_STREAM)
            if not drain.enter(refused):
                await context.abort(grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN)
            if streams:
                drain.leave()  # counted per message, not for the stream's life
            try:
                yield request
            finally:
                if not streams:
                    drain.leave()

        return around
