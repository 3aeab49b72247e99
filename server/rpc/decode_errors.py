"""Undecodable requests are the caller's error: INVALID_ARGUMENT, not INTERNAL.

gRPC answers a request whose bytes do not parse as the method's message with INTERNAL
("Exception deserializing request!"), which reads as a server fault and invites retries. The
interceptor here gives each handler a tolerant deserializer that turns bytes it cannot decode
into a marker, and the behaviour refuses a call that received the marker with INVALID_ARGUMENT
naming the message type it expected.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import grpc

from .rpc_wrap import (
    BIDI_STREAM,
    CLIENT_STREAM,
    SERVER_STREAM,
    rpc_type,
    split_method,
)

__all__ = ["UNDECODABLE", "DecodeErrorInterceptor"]


class _Undecodable:
    """Marker standing for a request whose bytes did not decode."""

    def __repr__(self) -> str:
        return "UNDECODABLE"


UNDECODABLE = _Undecodable()


def _message_type_name(deserializer: Callable[[bytes], Any], method: str) -> str:
    """"hpcdispatch.v1.DispatchRequest" for `DispatchRequest.FromString`; otherwise a name
    derived from the method."""
    owner = getattr(deserializer, "__self__", None)
    descriptor = getattr(owner, "DESCRIPTOR", None)
    full_name = getattr(descriptor, "full_name", None)
    if isinstance(full_name, str):
        return full_name
    service, name = split_method(method)
    return f"the request message of {service}/{name}"


def _tolerant(deserializer: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception:  # DecodeError, or whatever a custom deserializer raises
            return UNDECODABLE

    return deserialize


class DecodeErrorInterceptor(grpc.ServerInterceptor):
    """Answer INVALID_ARGUMENT to requests that do not decode as the method's message type.

    Register it last (innermost), so that the other interceptors see and count the refusal.
    """

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler | None:
        handler = continuation(handler_call_details)
        if handler is None or handler.request_deserializer is None:
            return handler
        expected = _message_type_name(handler.request_deserializer, handler_call_details.method)
        return _tolerant_handler(handler, expected)


def _refuse(context: grpc.ServicerContext, expected: str) -> NoReturn:
    context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                  f"the request could not be decoded as a {expected} message (malformed "
                  "protobuf bytes, or a message of another type)")
    raise AssertionError("abort returned")  # pragma: no cover


def _tolerant_handler(handler: grpc.RpcMethodHandler, expected: str) -> grpc.RpcMethodHandler:
    """`handler` with a tolerant deserializer and a behaviour that refuses UNDECODABLE."""
    assert handler.request_deserializer is not None
    deserializer = _tolerant(handler.request_deserializer)
    serializer = handler.response_serializer
    kind = rpc_type(handler)

    def checked(request: Any, context: grpc.ServicerContext) -> Any:
        if request is UNDECODABLE:
            _refuse(context, expected)
        return request

    def checked_stream(requests: Iterator[Any], context: grpc.ServicerContext) -> Iterator[Any]:
        for request in requests:
            yield checked(request, context)

    if kind == CLIENT_STREAM:
        client_stream = handler.stream_unary
        assert client_stream is not None
        return grpc.stream_unary_rpc_method_handler(
            lambda requests, context: client_stream(checked_stream(requests, context), context),
            deserializer, serializer)
    if kind == BIDI_STREAM:
        bidi_stream = handler.stream_stream
        assert bidi_stream is not None
        return grpc.stream_stream_rpc_method_handler(
            lambda requests, context: bidi_stream(checked_stream(requests, context), context),
            deserializer, serializer)
    if kind == SERVER_STREAM:
        server_stream = handler.unary_stream
        assert server_stream is not None
        return grpc.unary_stream_rpc_method_handler(
            lambda request, context: server_stream(checked(request, context), context),
            deserializer, serializer)
    unary = handler.unary_unary
    assert unary is not None
    return grpc.unary_unary_rpc_method_handler(
        lambda request, context: unary(checked(request, context), context),
        deserializer, serializer)
