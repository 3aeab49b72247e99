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
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import grpc

from hpcdispatch.v1 import dispatcher_pb2 as pb

from .rpc_wrap import Around, AroundInterceptor, split_method

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
    """Counts DispatcherService calls in flight; refuses new decisions while draining."""

    def __init__(self, drain: Drain) -> None:
        self.drain = drain

    def around_for(self, details: grpc.HandlerCallDetails) -> Around:
        service, method = split_method(details.method)
        counted = service in (DISPATCHER_SERVICE, SESSION_SERVICE)
        refused = method in REFUSED_WHILE_DRAINING
        drain = self.drain

        def around(
            kind: str, request: Any, context: grpc.ServicerContext, call: Callable[[], Any]
        ) -> Any:
            if not counted:
                return call()
            if not drain.enter(refused):
                context.abort(grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN)
            try:
                return call()
            finally:
                drain.leave()

        return around
