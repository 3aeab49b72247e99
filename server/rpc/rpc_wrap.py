"""Wrap the behaviour of a gRPC method handler, whatever its cardinality (for interceptors)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc

# An RPC's type, named as in the conventional gRPC server metrics (label grpc_type).
UNARY = "unary"
CLIENT_STREAM = "client_stream"
SERVER_STREAM = "server_stream"
BIDI_STREAM = "bidi_stream"

# around(rpc_type, request_or_iterator, context, call) runs `call()` and returns its result.
Around = Callable[[str, Any, grpc.ServicerContext, Callable[[], Any]], Any]


def split_method(full_method: str) -> tuple[str, str]:
    """"/pkg.Service/Method" -> ("pkg.Service", "Method")."""
    service, _, method = full_method.lstrip("/").rpartition("/")
    return service or "unknown", method or "unknown"


def rpc_type(handler: grpc.RpcMethodHandler) -> str:
    if handler.request_streaming:
        return BIDI_STREAM if handler.response_streaming else CLIENT_STREAM
    return SERVER_STREAM if handler.response_streaming else UNARY


def _behaviour(function: Callable[..., Any] | None) -> Callable[..., Any]:
    if function is None:
        raise ValueError("gRPC method handler without a behaviour for its cardinality")
    return function


def wrap_handler(handler: grpc.RpcMethodHandler, around: Around) -> grpc.RpcMethodHandler:
    """A handler equal to `handler` whose behaviour runs inside `around`.

    For response-streaming methods `call()` returns an iterator that `around` may consume and
    re-yield (it is itself a generator then) so that the whole stream is measured.
    """
    kind = rpc_type(handler)
    if kind == UNARY:
        inner = _behaviour(handler.unary_unary)

        def unary(request: Any, context: grpc.ServicerContext) -> Any:
            return around(kind, request, context, lambda: inner(request, context))

        return grpc.unary_unary_rpc_method_handler(
            unary, handler.request_deserializer, handler.response_serializer
        )
    if kind == CLIENT_STREAM:
        inner = _behaviour(handler.stream_unary)

        def client_stream(requests: Iterator[Any], context: grpc.ServicerContext) -> Any:
            return around(kind, requests, context, lambda: inner(requests, context))

        return grpc.stream_unary_rpc_method_handler(
            client_stream, handler.request_deserializer, handler.response_serializer
        )
    if kind == SERVER_STREAM:
        inner = _behaviour(handler.unary_stream)

        def server_stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            yield from around(kind, request, context, lambda: inner(request, context))

        return grpc.unary_stream_rpc_method_handler(
            server_stream, handler.request_deserializer, handler.response_serializer
        )
    inner = _behaviour(handler.stream_stream)

    def bidi_stream(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        yield from around(kind, requests, context, lambda: inner(requests, context))

    return grpc.stream_stream_rpc_method_handler(
        bidi_stream, handler.request_deserializer, handler.response_serializer
    )


class AroundInterceptor(grpc.ServerInterceptor):
    """A server interceptor that runs each call's behaviour inside `around_for(details)`."""

    def around_for(self, details: grpc.HandlerCallDetails) -> Around:
        raise NotImplementedError

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        return wrap_handler(handler, self.around_for(handler_call_details))
