"""Request ids: taken from `x-request-id` metadata or generated, bound to every log line.

The id is bound as a structlog context variable for the duration of the call (service code
adds more, e.g. the snapshot time; the work a call does in a pool thread runs in a copy of the
call's context variables) and sent back to the caller as `x-request-id` initial metadata.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
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

    Each call runs in a context of its own (an asyncio task's); it is cleared when the call
    ends all the same, with whatever the service bound during it.
    """

    def around_for(self, details: grpc.HandlerCallDetails,
                   handler: grpc.RpcMethodHandler) -> Around:
        _, method = split_method(details.method)

        @asynccontextmanager
        async def around(kind: str, request: Any, context: Any) -> AsyncIterator[Any]:
            request_id = request_id_of(context.invocation_metadata())
            if kind in (UNARY, CLIENT_STREAM):
                await context.send_initial_metadata(((REQUEST_ID_KEY, request_id),))
            structlog.contextvars.clear_contextvars()
            structlog.contextvars.bind_contextvars(request_id=request_id, rpc=method)
            try:
                yield request
            finally:
                structlog.contextvars.clear_contextvars()

        return around
