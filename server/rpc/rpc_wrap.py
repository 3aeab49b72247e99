"""Wrap the behaviour of a gRPC method handler, whatever its cardinality (for the asyncio
server's interceptors: metrics, request ids, identities, draining, undecodable requests).

An interceptor says what happens around each call of a method (`around_for`): an asynchronous
context manager entered before the behaviour runs and left when it ends (returned, raised,
aborted or cancelled), which yields the request the behaviour gets (the same, or for a
request stream an iterator that checks each message). It may also replace the method's
request deserializer (`deserializer_for`).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import grpc

# An RPC's type, named as in the conventional gRPC server metrics (label grpc_type).
UNARY = "unary"
CLIENT_STREAM = "client_stream"
SERVER_STREAM = "server_stream"
BIDI_STREAM = "bidi_stream"

# around(rpc_type, request_or_iterator, context) -> an async context manager yielding the
# request (or request iterator) the behaviour gets.
Around = Callable[[str, Any, Any], AbstractAsyncContextManager[Any]]
Deserializer = Callable[[bytes], Any]

_MAKERS = {
    UNARY: grpc.unary_unary_rpc_method_handler,
    CLIENT_STREAM: grpc.stream_unary_rpc_method_handler,
    SERVER_STREAM: grpc.unary_stream_rpc_method_handler,
    BIDI_STREAM: grpc.stream_stream_rpc_method_handler,
}
_BEHAVIOURS = {UNARY: "unary_unary", CLIENT_STREAM: "stream_unary",
               SERVER_STREAM: "unary_stream", BIDI_STREAM: "stream_stream"}


def split_method(full_method: str) -> tuple[str, str]:
    """"/pkg.Service/Method" -> ("pkg.Service", "Method")."""
    service, _, method = full_method.lstrip("/").rpartition("/")
    return service or "unknown", method or "unknown"


def rpc_type(handler: grpc.RpcMethodHandler) -> str:
    if handler.request_streaming:
        return BIDI_STREAM if handler.response_streaming else CLIENT_STREAM
    return SERVER_STREAM if handler.response_streaming else UNARY


def wrap_handler(handler: grpc.RpcMethodHandler, around: Around,
                 deserializer: Deserializer | None = None) -> grpc.RpcMethodHandler:
    """A handler equal to `handler` whose behaviour runs inside `around` (and whose requests
    `deserializer` decodes, when given).

    A response-streaming behaviour is an async generator, or a coroutine that writes its
    responses itself (grpc.aio allows both, the health service's Watch is one): the wrapper is
    of the same kind, so that `around` spans the whole stream.
    """
    kind = rpc_type(handler)
    inner = getattr(handler, _BEHAVIOURS[kind])
    if inner is None:
        raise ValueError("gRPC method handler without a behaviour for its cardinality")
    if kind in (UNARY, CLIENT_STREAM) or inspect.iscoroutinefunction(inner):
        behaviour: Callable[..., Any] = _awaited(kind, inner, around)
    else:
        behaviour = _streamed(kind, inner, around)
    made: grpc.RpcMethodHandler = _MAKERS[kind](
        behaviour, deserializer or handler.request_deserializer, handler.response_serializer)
    return made


def _awaited(kind: str, inner: Callable[[Any, Any], Awaitable[Any]],
             around: Around) -> Callable[[Any, Any], Awaitable[Any]]:
    async def behaviour(request: Any, context: Any) -> Any:
        async with around(kind, request, context) as given:
            return await inner(given, context)

    return behaviour


def _streamed(kind: str, inner: Callable[[Any, Any], AsyncIterator[Any]],
              around: Around) -> Callable[[Any, Any], AsyncIterator[Any]]:
    async def behaviour(request: Any, context: Any) -> AsyncIterator[Any]:
        async with around(kind, request, context) as given:
            async for response in inner(given, context):
                yield response

    return behaviour


class AroundInterceptor(grpc.aio.ServerInterceptor):
    """A server interceptor that runs each call's behaviour inside `around_for(details,
    handler)`. What happens around a call depends on its method alone (a call's own metadata
    is read from its context), so each method's handler is wrapped once, not at every call."""

    def around_for(self, details: grpc.HandlerCallDetails,
                   handler: grpc.RpcMethodHandler) -> Around | None:
        """What happens around each call of the method (None: nothing, the handler as is)."""
        raise NotImplementedError

    def deserializer_for(self, handler: grpc.RpcMethodHandler) -> Deserializer | None:
        """The method's request deserializer instead of its own (None: its own)."""
        return None

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return handler
        # method -> (its handler, wrapped), made at the method's first call (on the loop).
        wrapped = self.__dict__.setdefault("_wrapped", {})
        known = wrapped.get(handler_call_details.method)
        if known is not None and known[0] is handler:
            made: grpc.RpcMethodHandler = known[1]
            return made
        around = self.around_for(handler_call_details, handler)
        made = handler if around is None else wrap_handler(
            handler, around, self.deserializer_for(handler))
        wrapped[handler_call_details.method] = (handler, made)
        return made
