"""The threads that do the calls' work, and the way to them from the server's event loop.

The server answers on an asyncio event loop (grpc.aio): it reads and writes messages, answers
health checks and reflection, and runs the interceptors there. What a call computes (intake,
decisions, a session's state, completion reports) is synchronous code, run in one of the
pool's `workers` threads with a ThreadContext (server/rpc/thread_context.py): a unary call, or
one message of a session stream, takes a thread only while it is worked on, so a stream that
waits for its next message holds none.

The threads are daemon threads, and the pool knows what each is working on: a call stuck in a
plugin's code cannot keep the process alive once the server has stopped, and `serve` names it
before it exits (server/rpc/app.py).
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import queue
import sys
import sysconfig
import threading
import time
import traceback
from collections.abc import Awaitable, Callable
from concurrent import futures
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import structlog
from google.protobuf.descriptor import ServiceDescriptor

from .thread_context import CallAborted, ThreadContext, code_of, trailing_metadata_of

# A synchronous behaviour: (request, context) -> response.
Behaviour = Callable[[Any, Any], Any]
# How long a call the caller left is still waited for, so that what it held (a session, a
# decision slot) is given back before the call counts as ended; a call stuck longer is left to
# its thread. Not while the server stops: its grace period bounds everything then.
CANCELLED_WORK_WAIT_SECONDS = 10.0
_STDLIB = sysconfig.get_paths()["stdlib"]


class DaemonThreads(futures.Executor):
    """An executor of `threads` daemon threads (concurrent.futures' own threads are joined at
    the interpreter's exit, so one stuck thread would keep the process alive)."""

    def __init__(self, threads: int, name: str) -> None:
        self._work: queue.SimpleQueue[tuple[futures.Future[Any], Callable[[], Any]] | None] = (
            queue.SimpleQueue())
        self._threads = [threading.Thread(target=self._serve, name=f"{name}-{i}", daemon=True)
                         for i in range(threads)]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> futures.Future[Any]:
        future: futures.Future[Any] = futures.Future()
        self._work.put((future, lambda: fn(*args, **kwargs)))
        return future

    def _serve(self) -> None:
        while (item := self._work.get()) is not None:
            future, work = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = work()
            except BaseException as exc:  # a plugin's SystemExit too: the call's error
                future.set_exception(exc)
            else:
                future.set_result(result)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """The threads end once their current work is done (joined with `wait`)."""
        for _ in self._threads:
            self._work.put(None)
        if wait:
            for thread in self._threads:
                thread.join()


@dataclass(frozen=True, slots=True)
class Work:
    """What one pool thread is working on."""

    call: str  # the RPC, "Dispatch", or a stream message's call, "StreamSession/update"
    request_id: str
    began: float  # time.monotonic()
    thread: int  # its thread's ident


class CallPool:
    """`threads` daemon threads for the calls' synchronous work (module doc)."""

    def __init__(self, threads: int) -> None:
        self.threads = threads
        self._executor = DaemonThreads(threads, "hpcdispatch-call")
        self._working: dict[int, Work] = {}
        self._changed = threading.Condition()
        self.stopping = False  # set once the server stops: cancelled calls are not waited for

    async def call(self, behaviour: Behaviour, request: Any, context: ThreadContext,
                   name: str) -> Any:
        """`behaviour(request, context)` in a pool thread, with the caller's context variables
        (its request id); its result or its exception. When the call ends on the loop first
        (its caller left), the context says so, and the work is waited for a while (module
        constant) unless it had not started yet."""
        run = contextvars.copy_context().run
        work = self._executor.submit(run, self._work, name, behaviour, request, context)
        answer = asyncio.wrap_future(work)
        answer.add_done_callback(_retrieved)
        try:
            return await asyncio.shield(answer)
        except asyncio.CancelledError:
            context.ended = True
            if not work.cancel() and not self.stopping:
                await asyncio.wait({answer}, timeout=CANCELLED_WORK_WAIT_SECONDS)
            raise

    async def answer(self, behaviour: Behaviour, request: Any, context: Any, name: str) -> Any:
        """A unary call's answer: `behaviour` in a pool thread; an abort there ends the call
        with its status (google.rpc details included)."""
        try:
            return await self.call(behaviour, request, ThreadContext(context), name)
        except CallAborted as aborted:
            status = aborted.status
            await context.abort(code_of(status), status.message, trailing_metadata_of(status))

    def _work(self, name: str, behaviour: Behaviour, request: Any,
              context: ThreadContext) -> Any:
        thread = threading.get_ident()
        request_id = str(structlog.contextvars.get_contextvars().get("request_id", ""))
        with self._changed:
            self._working[thread] = Work(name, request_id, time.monotonic(), thread)
        try:
            return behaviour(request, context)
        finally:
            with self._changed:
                del self._working[thread]
                self._changed.notify_all()

    # -- stopping ------------------------------------------------------------------------------

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no thread works on a call, at most `timeout` seconds; True if none does."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._working, timeout=max(timeout, 0.0))

    def still_working(self) -> list[dict[str, Any]]:
        """What the threads still work on, each with where its code is now (the innermost
        frame outside Python's standard library: a plugin's, when one is stuck)."""
        with self._changed:
            working = list(self._working.values())
        frames = sys._current_frames()
        now = time.monotonic()
        return [{"call": w.call, "request_id": w.request_id,
                 "running_s": round(now - w.began, 3), "at": where(frames.get(w.thread))}
                for w in working]

    def shutdown(self) -> None:
        """Stop taking work; the threads end after what they do now (not waited for)."""
        self.stopping = True
        self._executor.shutdown(wait=False)


def where(frame: Any) -> str:
    """"file:line in function" of the innermost frame of `frame`'s stack outside the standard
    library ("" without a frame)."""
    if frame is None:
        return ""
    stack = traceback.extract_stack(frame)
    outside = [f for f in stack if not f.filename.startswith(_STDLIB)] or stack
    last = outside[-1]
    return f"{last.filename}:{last.lineno} in {last.name}"


def _retrieved(answer: asyncio.Future[Any]) -> None:
    """Mark the outcome of work nobody awaits any more as seen (asyncio would log it)."""
    if not answer.cancelled():
        answer.exception()


def pooled(pool: CallPool, servicer: object, service: ServiceDescriptor) -> Any:
    """An asyncio servicer of `service` (for its generated add_*_to_server): `servicer`'s
    asynchronous methods as they are, its synchronous (unary) ones answered in `pool`'s
    threads."""
    methods: dict[str, Callable[..., Any]] = {}
    for method in service.methods:
        behaviour = getattr(servicer, method.name)
        if inspect.iscoroutinefunction(behaviour) or inspect.isasyncgenfunction(behaviour):
            methods[method.name] = behaviour
        elif method.client_streaming or method.server_streaming:
            raise TypeError(f"{service.name}.{method.name} streams: it must be asynchronous")
        else:
            methods[method.name] = _unary_on(pool, behaviour, method.name)
    return SimpleNamespace(**methods)


def _unary_on(pool: CallPool, behaviour: Behaviour,
              name: str) -> Callable[[Any, Any], Awaitable[Any]]:
    async def unary(request: Any, context: Any) -> Any:
        return await pool.answer(behaviour, request, context, name)

    return unary
