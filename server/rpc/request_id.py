"""Request ids: taken from `x-request-id` metadata or generated, bound to every log line.

The id is bound as a structlog context variable for the duration of the call (service code
adds more, e.g. the snapshot time) and sent back to the caller as `x-request-id` initial
metadata.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import structlog

from .rpc_wrap import (
    CLIENT_STREAM,
    UNARY,
    Around,
    AroundInterceptor,
    split_method,
)

REQUEST_ID_KEY = "x-request-id"
MAX_REQUEST_ID_CHARS = 128


def request_id_of(metadata: Any) -> str:
    """The caller's id (trimmed to a sane length) or a fresh one."""
    for key, value in metadata or ():
        if key == REQUEST_ID_KEY and value:
            text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
            return text[:MAX_REQUEST_ID_CHARS]
    return uuid.uuid4().hex


class RequestIdInterceptor(AroundInterceptor):
    """Binds request_id and rpc (the method name) for each call's log lines.

    The context is cleared when the call ends, with whatever the service bound during it.
    """

    def around_for(self, details: grpc.HandlerCallDetails) -> Around:
        request_id = request_id_of(details.invocation_metadata)
        _, method = split_method(details.method)

        def around(
            kind: str, request: Any, context: grpc.ServicerContext, call: Callable[[], Any]
        ) -> Any:
            if kind in (UNARY, CLIENT_STREAM):
                context.send_initial_metadata(((REQUEST_ID_KEY, request_id),))
                _bind(request_id, method)
                try:
                    return call()
                finally:
                    structlog.contextvars.clear_contextvars()
            return _bound_stream(call, request_id, method)

        return around


def _bind(request_id: str, method: str) -> None:
    """A worker thread serves many calls: start each from a clean context."""
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(request_id=request_id, rpc=method)


def _bound_stream(call: Callable[[], Any], request_id: str, method: str) -> Iterator[Any]:
    _bind(request_id, method)
    try:
        yield from call()
    finally:
        structlog.contextvars.clear_contextvars()
