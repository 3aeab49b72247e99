"""Undecodable requests are the caller's error: INVALID_ARGUMENT, not UNKNOWN or INTERNAL.

gRPC answers a request whose bytes do not parse as the method's message with a status that
reads as a server fault (UNKNOWN "Unexpected <class 'DecodeError'>" on the asyncio server),
which invites retries. The interceptor here gives each handler a tolerant deserializer that
turns bytes it cannot decode into a marker, and around the behaviour refuses the marker (the
request, or a message of a request stream when it comes) with INVALID_ARGUMENT naming the
message type it expected.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import grpc

from .rpc_wrap import (
    BIDI_STREAM,
    CLIENT_STREAM,
    Around,
    AroundInterceptor,
    Deserializer,
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


def _tolerant(deserializer: Callable[[bytes], Any]) -> Deserializer:
    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception:  # DecodeError, or whatever a custom deserializer raises
            return UNDECODABLE

    return deserialize


async def _refuse(context: Any, expected: str) -> None:
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                        f"the request could not be decoded as a {expected} message (malformed "
                        "protobuf bytes, or a message of another type)")


async def _checked(requests: AsyncIterator[Any], context: Any,
                   expected: str) -> AsyncIterator[Any]:
    async for request in requests:
        if request is UNDECODABLE:
            await _refuse(context, expected)
        yield request


class DecodeErrorInterceptor(AroundInterceptor):
    """Answer INVALID_ARGUMENT to requests that do not decode as the method's message type.

    Register it last (innermost), so that the other interceptors see and count the refusal.
    """

    def deserializer_for(self, handler: grpc.RpcMethodHandler) -> Deserializer | None:
        deserializer = handler.request_deserializer
        return None if deserializer is None else _tolerant(deserializer)

    def around_for(self, details: grpc.HandlerCallDetails,
                   handler: grpc.RpcMethodHandler) -> Around | None:
        if handler.request_deserializer is None:
            return None
        expected = _message_type_name(handler.request_deserializer, details.method)

        @asynccontextmanager
        async def around(kind: str, request: Any, context: Any) -> AsyncIterator[Any]:
            if kind in (CLIENT_STREAM, BIDI_STREAM):
                yield _checked(request, context, expected)
                return
            if request is UNDECODABLE:
                await _refuse(context, expected)
            yield request

        return around
