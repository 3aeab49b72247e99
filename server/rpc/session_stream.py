"""StreamSession: a caller's session calls on one bidirectional stream (the contract's "Session
streams" section in dispatcher.proto).

Each message is answered by the unary call of its kind (`StreamCalls`), run with a
MessageContext: the same checks, session rules, decision front and errors, one message at a
time in arrival order. A call's error becomes the message's `error` answer (BadRequest field
paths prefixed with the call's field) and the stream goes on. The stream itself ends only as the
contract says: the caller closes or cancels it, its deadline passes, the server drains
(UNAVAILABLE before the next message is taken up: the one in progress is answered, and counted
in flight so that a graceful stop waits for it), or no decision thread is free when it starts
(RESOURCE_EXHAUSTED): a stream holds one of the workers - 1 decision threads for its whole
life, so health checks always keep a thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import structlog
from google.rpc import error_details_pb2, status_pb2

from hpcdispatch.catalog import STREAM_ANSWER_FIELDS
from hpcdispatch.v1 import dispatcher_pb2 as pb

from ..intake.violations import Violation
from .decision_front import DecisionFront
from .draining import SHUTTING_DOWN, Drain
from .errors import abort_invalid_argument
from .message_context import MessageAborted, MessageContext
from .metrics import ServiceMetrics, code_label

log = structlog.get_logger("hpcdispatch.sessions")

# A unary behaviour: (request, context) -> response.
Unary = Callable[[Any, grpc.ServicerContext], Any]
CODE_BY_VALUE = {code.value[0]: code for code in grpc.StatusCode}


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

    def __init__(self, calls: StreamCalls, front: DecisionFront, drain: Drain,
                 metrics: ServiceMetrics) -> None:
        self.calls = calls
        self.front = front
        self.drain = drain
        self.metrics = metrics

    def serve(self, requests: Iterator[pb.SessionStreamRequest],
              context: grpc.ServicerContext) -> Iterator[pb.SessionStreamResponse]:
        """Answer each message in turn while the stream lasts."""
        with self.front.stream_thread(context):
            self.metrics.session_streams_open.inc()
            answered = 0
            try:
                for request in requests:
                    # Counted in flight until its answer is sent: a graceful stop waits for it.
                    if not self.drain.enter(refuse_when_draining=True):
                        log.info("session stream ended: draining", answered=answered)
                        context.abort(grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN)
                    try:
                        yield self.answer(request, context)
                    finally:
                        self.drain.leave()
                    answered += 1
            finally:
                self.metrics.session_streams_open.dec()
                log.info("session stream ended", answered=answered)

    def answer(self, request: pb.SessionStreamRequest,
               stream: grpc.ServicerContext) -> pb.SessionStreamResponse:
        """The answer to one message: its call's response, or its call's error."""
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
        except MessageAborted as aborted:
            status = aborted.status if call is None else with_field_prefix(aborted.status, call)
            answer.error.CopyFrom(status)
            code = CODE_BY_VALUE.get(status.code, grpc.StatusCode.UNKNOWN)
        self.metrics.session_stream_messages.labels(call or "none", code_label(code)).inc()
        return answer
