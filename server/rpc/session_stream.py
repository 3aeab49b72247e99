"""StreamSession: a caller's session calls on one bidirectional stream (the contract's "Session
streams" section in dispatcher.proto).

Each message is answered by the unary call of its kind (`StreamCalls`), run with a
MessageContext: the same checks, session rules, decision front and errors, one message at a
time in arrival order. A call's error becomes the message's `error` answer (BadRequest field
paths prefixed with the call's field) and the stream goes on. The stream is read on the
server's event loop, and each message is worked on in a pool thread (server/rpc/call_pool.py)
only while it is answered, or on the loop itself when its call has been short on this stream
and a decision slot is free (server/rpc/inline_answers.py): a stream waiting for its next
message holds no thread and no decision slot, and its decisions are admitted per message, as
unary calls are. The stream
itself ends only as the contract says: the caller closes or cancels it, its deadline passes,
the server drains (UNAVAILABLE before the next message is taken up: the one in progress is
answered, and counted in flight so that a graceful stop waits for it), or no message came for
`stream_idle_seconds` (UNAVAILABLE saying so: the Python client starts a new stream at its next
call, as after a drain).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import grpc
import structlog
from google.rpc import error_details_pb2, status_pb2

from hpcdispatch.catalog import STREAM_ANSWER_FIELDS
from hpcdispatch.v1 import dispatcher_pb2 as pb

from ..intake.violations import Violation
from .call_pool import CallPool
from .draining import SHUTTING_DOWN, Drain
from .errors import abort_invalid_argument
from .inline_answers import InlineAnswers, always_room
from .message_context import MessageContext
from .metrics import ServiceMetrics, code_label
from .thread_context import CallAborted, ThreadContext, code_of

log = structlog.get_logger("hpcdispatch.sessions")

# A unary behaviour: (request, context) -> response.
Unary = Callable[[Any, grpc.ServicerContext], Any]


@dataclass(frozen=True, slots=True)
class StreamCalls:
    """The unary behaviours that answer a stream's messages, by the message's call field."""

    open: Unary  # SessionServicer.OpenSession
    update: Unary  # SessionServicer.UpdateSession
    close: Unary  # SessionServicer.CloseSession
    report_completions: Unary  # DispatcherService.ReportCompletions

    def of(self, call: str) -> Unary:
        behaviour: Unary = getattr(self, call)
        return behaviour


def with_field_prefix(status: status_pb2.Status, call: str) -> status_pb2.Status:
    """`status` with each BadRequest field path starting at the stream message (`update.` +)."""
    for detail in status.details:
        bad = error_details_pb2.BadRequest()
        if detail.Unpack(bad):
            for violation in bad.field_violations:
                violation.field = f"{call}.{violation.field}"
            detail.Pack(bad)
    return status


class SessionStreams:
    """Answers session streams with the unary calls (module doc)."""

    def __init__(self, calls: StreamCalls, pool: CallPool, drain: Drain,
                 metrics: ServiceMetrics, idle_seconds: float,
                 room: Callable[[], bool] = always_room) -> None:
        """`room`: whether a decision would get its thread and slot at once (a short
        message is then answered on the loop: server/rpc/inline_answers.py)."""
        self.calls = calls
        self.room = room
        self.pool = pool
        self.drain = drain
        self.metrics = metrics
        self.idle_seconds = idle_seconds

    async def serve(self, requests: AsyncIterator[pb.SessionStreamRequest],
                    context: Any) -> AsyncIterator[pb.SessionStreamResponse]:
        """Answer each message in turn while the stream lasts."""
        stream = ThreadContext(context)
        inline = InlineAnswers(self.room)
        self.metrics.session_streams_open.inc()
        answered = 0
        try:
            while (request := await self._next(requests, context, answered)) is not None:
                # Counted in flight until its answer is sent: a graceful stop waits for it.
                if not self.drain.enter(refuse_when_draining=True):
                    log.info("session stream ended: draining", answered=answered)
                    await context.abort(grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN)
                try:
                    call = request.WhichOneof("call") or "none"
                    yield await self._answer_of(request, stream, call, inline)
                finally:
                    self.drain.leave()
                answered += 1
        finally:
            self.metrics.session_streams_open.dec()
            log.info("session stream ended", answered=answered)

    async def _next(self, requests: AsyncIterator[pb.SessionStreamRequest], context: Any,
                    answered: int) -> pb.SessionStreamRequest | None:
        """The stream's next message; None once the caller has closed it. A stream silent for
        idle_seconds is ended UNAVAILABLE."""
        try:
            async with asyncio.timeout(self.idle_seconds):
                request: pb.SessionStreamRequest = await anext(requests)
                return request
        except StopAsyncIteration:
            return None
        except TimeoutError:
            self.metrics.session_streams_idle_ended.inc()
            log.info("session stream ended: idle", answered=answered,
                     idle_s=self.idle_seconds)
            await context.abort(
                grpc.StatusCode.UNAVAILABLE,
                f"no message on this session stream for {self.idle_seconds:g} s "
                "(stream_idle_seconds): the server ended it; start a new stream (the "
                "sessions are kept)")
            raise AssertionError("abort returned") from None  # pragma: no cover

    async def _answer_of(self, request: pb.SessionStreamRequest, stream: ThreadContext,
                         call: str, inline: InlineAnswers) -> pb.SessionStreamResponse:
        """The answer to one message: on the loop when its call is short on this stream,
        else in a pool thread; either way its time is measured (inline_answers.py)."""
        if inline.on_loop(call):
            return self._timed_answer(inline, call, request, stream)
        answer: pb.SessionStreamResponse = await self.pool.call(
            partial(self._timed_answer, inline, call), request, stream,
            f"StreamSession/{call}")
        return answer

    def _timed_answer(self, inline: InlineAnswers, call: str,
                      request: pb.SessionStreamRequest,
                      stream: grpc.ServicerContext) -> pb.SessionStreamResponse:
        # The longer of its CPU and its wall time: CPU is what the loop would spend on it, and
        # an answer that waits (a knowledge base on the network, a slow plugin) must not hold
        # the loop either; a loaded machine only sends more answers to the threads.
        began, cpu = time.monotonic(), time.thread_time()
        try:
            return self.answer(request, stream)
        finally:
            inline.measured(call, max(time.thread_time() - cpu, time.monotonic() - began))

    def answer(self, request: pb.SessionStreamRequest,
               stream: grpc.ServicerContext) -> pb.SessionStreamResponse:
        """The answer to one message: its call's response, or its call's error (in the
        message's thread)."""
        context = MessageContext(stream, request.timeout_ms, time.monotonic())
        call = request.WhichOneof("call")
        answer = pb.SessionStreamResponse(tag=request.tag)
        code = grpc.StatusCode.OK
        try:
            if call is None:
                abort_invalid_argument(context, "no call in the stream message", [Violation(
                    "call", f"set one of {', '.join(STREAM_ANSWER_FIELDS)}")])
            response = self.calls.of(call)(getattr(request, call), context)
            getattr(answer, STREAM_ANSWER_FIELDS[call]).CopyFrom(response)
        except CallAborted as aborted:
            status = aborted.status if call is None else with_field_prefix(aborted.status, call)
            answer.error.CopyFrom(status)
            code = code_of(status)
        self.metrics.session_stream_messages.labels(call or "none", code_label(code)).inc()
        return answer
