"""Session calls on one bidirectional stream (StreamSession; the contract's "Session streams").

`SessionStream.call(kind, message, timeout)` sends one call (`open`, `update`, `close`,
`report_completions`) and returns its answer, as the unary call would, or raises its error
(`CallError`: the same code, message and details, read with `grpc_status.rpc_status` as a
unary call's). Messages go out one at a time, in order, on one gRPC stream that is started at
the first call and again after it ends:

- an answer's error that admission or a store gave (RESOURCE_EXHAUSTED, UNAVAILABLE) is retried
  with exponential backoff, as the unary calls' retry policy does; it changed nothing;
- a stream that ends UNAVAILABLE (the server draining, a connection lost, a server restarted)
  is started again and the message sent again: a message answered nothing was either not taken
  up or, for a delta, is a resend the session answers without applying it twice;
- a stream refused before answering anything (RESOURCE_EXHAUSTED: no decision thread free;
  UNIMPLEMENTED: a server without streams) raises `StreamRefused`: the message was not taken
  up, and the caller may send it as a unary call;
- each message has its deadline (`timeout`), sent along (`timeout_ms`) and watched here too: a
  message not answered in time cancels the stream (a server that does not answer) and raises
  DEADLINE_EXCEEDED.
"""

from __future__ import annotations

import contextlib
import queue
import random
import threading
import time
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf.message import Message

from hpcdispatch.catalog import STREAM_ANSWER_FIELDS
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc

from .call_error import CallError

# Answers' errors that changed nothing and may be sent again after a backoff.
RETRIED_ANSWERS = frozenset({grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE})
# How a stream may be refused before it answers anything (the message was not taken up).
REFUSALS = frozenset({grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNIMPLEMENTED})
# Seconds given to a closing stream to end before it is cancelled.
CLOSE_GRACE = 2.0


class StreamRefused(CallError):
    """The stream was refused before it took up anything (see REFUSALS)."""


@dataclass(frozen=True, slots=True)
class Backoff:
    """Retries of a call: at most `attempts` sends, the n-th retry after a random wait of up to
    initial × 2^(n-1) seconds, at most `most` (gRPC's retry policy's rule)."""

    attempts: int = 4
    initial: float = 0.2
    most: float = 5.0

    def wait(self, retry: int) -> float:
        return random.uniform(0, min(self.most, self.initial * 2 ** (retry - 1)))


class _Outbox:
    """The stream's request iterator: the messages put here, until `close`."""

    _CLOSED = object()

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def put(self, request: pb.SessionStreamRequest) -> None:
        self._queue.put(request)

    def close(self) -> None:
        self._queue.put(self._CLOSED)

    def __iter__(self) -> _Outbox:
        return self

    def __next__(self) -> pb.SessionStreamRequest:
        request = self._queue.get()
        if request is self._CLOSED:
            raise StopIteration
        message: pb.SessionStreamRequest = request
        return message


class _Watchdog:
    """Cancels a stream whose answer is overdue. One thread per SessionStream, started at the
    first call; arming costs a lock, not a wake-up: a later deadline than the one the thread
    waits for is seen when it wakes."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._call: grpc.Call | None = None
        self._waiting_until: float | None = None
        self._watching = False  # a thread watches (until `close`)
        self._generation = 0  # of the watching thread: one that sees another number ends
        self.fired = False

    def arm(self, deadline: float, call: grpc.Call) -> None:
        with self._cond:
            self._deadline, self._call, self.fired = deadline, call, False
            if not self._watching:
                self._watching = True
                self._generation += 1
                threading.Thread(target=self._watch, args=(self._generation,), daemon=True,
                                 name="hpcdispatch-stream-watchdog").start()
            elif self._waiting_until is None or deadline < self._waiting_until:
                self._cond.notify_all()

    def disarm(self) -> None:
        with self._cond:
            self._deadline = self._call = None

    def close(self) -> None:
        """End the watching thread (a later `arm` starts another)."""
        with self._cond:
            self._watching = False
            self._generation += 1
            self._cond.notify_all()

    def _watch(self, generation: int) -> None:
        while True:
            with self._cond:
                if generation != self._generation:
                    return
                overdue = None
                if self._deadline is None:
                    self._waiting_until = None
                    self._cond.wait()
                elif time.monotonic() >= self._deadline:
                    overdue, self._deadline, self.fired = self._call, None, True
                else:
                    self._waiting_until = self._deadline
                    self._cond.wait(self._deadline - time.monotonic())
            if overdue is not None:
                overdue.cancel()


class SessionStream:
    """A caller's session calls on one stream at a time (module doc). Not thread-safe: one
    call at a time, as a session's calls are."""

    def __init__(self, stub: pb_grpc.SessionServiceStub, backoff: Backoff | None = None) -> None:
        self._stub = stub
        self.backoff = backoff if backoff is not None else Backoff()
        self._outbox: _Outbox | None = None
        self._answers: Any = None  # the stream's response iterator (a grpc.Call too)
        self._answered = 0  # answers received on the current stream
        self._tag = 0
        self._watchdog = _Watchdog()
        self.streams = 0  # streams started

    def call(self, kind: str, message: Message, timeout: float) -> Any:
        """The answer to `message` sent as the call `kind` (a SessionStreamRequest call field:
        open, update, close, report_completions), or its error raised (module doc)."""
        deadline = time.monotonic() + timeout
        retry = 0
        while True:
            left = deadline - time.monotonic()
            call: dict[str, Any] = {kind: message}
            request = pb.SessionStreamRequest(timeout_ms=max(1, round(left * 1000)), **call)
            try:
                answer = self._exchange(request, deadline, timeout)
            except StreamRefused:
                raise
            except CallError as ended:  # the stream ended without answering
                if ended.code() != grpc.StatusCode.UNAVAILABLE:
                    raise
                error = ended
            else:
                if not answer.HasField("error"):
                    return getattr(answer, STREAM_ANSWER_FIELDS[kind])
                error = CallError.of_status(answer.error)
                if error.code() not in RETRIED_ANSWERS:
                    raise error
            retry += 1
            pause = self.backoff.wait(retry)
            if retry >= self.backoff.attempts or time.monotonic() + pause >= deadline:
                raise error
            time.sleep(pause)

    def close(self) -> None:
        """End the stream (its messages are all answered) and the watchdog."""
        answers, outbox = self._answers, self._outbox
        self._answers = self._outbox = None
        if answers is not None and outbox is not None:
            outbox.close()
            self._watchdog.arm(time.monotonic() + CLOSE_GRACE, answers)
            with contextlib.suppress(grpc.RpcError):
                for _ in answers:  # the server's end of the stream
                    pass
            self._watchdog.disarm()
        self._watchdog.close()

    def _exchange(self, request: pb.SessionStreamRequest, deadline: float,
                  timeout: float) -> pb.SessionStreamResponse:
        """Send `request` on the stream (started when there is none) and read its answer;
        raises CallError when the stream ends first (StreamRefused when it was refused)."""
        if self._answers is None:
            self._start()
        assert self._outbox is not None
        answers = self._answers
        self._tag += 1
        request.tag = self._tag
        self._watchdog.arm(deadline, answers)
        self._outbox.put(request)
        try:
            answer: pb.SessionStreamResponse = next(answers)
        except (grpc.RpcError, StopIteration) as ended:
            raise self._ended(ended, timeout) from None
        finally:
            self._watchdog.disarm()
        if self._watchdog.fired:  # cancelled as the answer came: the next call needs a stream
            self._drop()
        if answer.tag != request.tag:
            self._drop()
            raise CallError(grpc.StatusCode.INTERNAL, f"the stream answered message "
                            f"{answer.tag} where {request.tag} was due")
        self._answered += 1
        return answer

    def _start(self) -> None:
        self._outbox = _Outbox()
        self._answers = self._stub.StreamSession(self._outbox, wait_for_ready=True)
        self._answered = 0
        self.streams += 1

    def _drop(self) -> None:
        """Forget the stream, cancelled (a new one starts at the next call)."""
        if self._answers is not None:
            self._answers.cancel()
        if self._outbox is not None:
            self._outbox.close()
        self._answers = self._outbox = None

    def _ended(self, ended: BaseException, timeout: float) -> CallError:
        """The error of a stream that ended without answering the message sent."""
        answered = self._answered
        self._drop()
        if self._watchdog.fired:
            return CallError(grpc.StatusCode.DEADLINE_EXCEEDED,
                             f"no answer on the session stream within {timeout:g} s")
        if isinstance(ended, StopIteration):
            return CallError(grpc.StatusCode.UNAVAILABLE,
                             "the session stream ended without answering")
        code = ended.code() if isinstance(ended, grpc.Call) else grpc.StatusCode.UNKNOWN
        details = (ended.details() if isinstance(ended, grpc.Call) else None) or str(ended)
        if answered == 0 and code in REFUSALS:
            return StreamRefused(code, details)
        return CallError(code, details)
