"""Which plugin's code runs now, so that a plugin that ends the process is named first.

A plugin runs in the server's process (docs/plugins.md): one that calls `os._exit` or
`os.abort` ends it without an exception its guard could catch. The guards
(`dispatchers/guard.py`, `predictors/guard.py`) run every call into plugin code inside
`plugin_call(group, name, what)`, which records it per thread (a dictionary entry, no I/O).
Once a guard exists, `watch_process_exits` has put a watch on `os._exit` and `os.abort`: called
while plugin code runs, it first logs `plugin ended the process` (critical, with the plugin's
group, name and call, and how it ended the process), then ends the process as asked. When the
thread that ends it runs no plugin call (a thread the plugin started itself, or the server's
own forced exit), `process ends while plugin code runs` names every plugin call in progress.
The watch also enables Python's `faulthandler`: a crash in native code (SIGSEGV, SIGABRT, ...)
dumps every thread's stack to stderr, where the plugin's module names it.
"""

from __future__ import annotations

import faulthandler
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NoReturn

from .lazy_logger import LazyLogger

log = LazyLogger("hpcdispatch.plugins")


@dataclass(frozen=True, slots=True)
class PluginCall:
    """One call into a plugin's code: which plugin, what was called, in which process."""

    group: str  # "dispatcher" or "predictor"
    name: str  # its registered name
    what: str  # the method called, e.g. "decide"
    pid: int  # a forked child inherits the table, not the calls


_calls: dict[int, PluginCall] = {}  # thread ident -> its call in progress
_lock = threading.Lock()
_call_ended = threading.Condition(_lock)
_watched = False


@contextmanager
def plugin_call(group: str, name: str, what: str) -> Iterator[None]:
    """Run a call into plugin code `name` (of `group`) as the current thread's call."""
    ident = threading.get_ident()
    with _lock:
        outer = _calls.get(ident)
        _calls[ident] = PluginCall(group, name, what, os.getpid())
    try:
        yield
    finally:
        with _lock:
            if outer is None:
                _calls.pop(ident, None)
            else:
                _calls[ident] = outer
            _call_ended.notify_all()


def calls_in_progress() -> tuple[PluginCall | None, list[PluginCall]]:
    """The current thread's plugin call (None: it runs none) and the other threads' calls
    running now in this process."""
    me, pid = threading.get_ident(), os.getpid()
    with _lock:
        mine = _calls.get(me)
        others = [call for ident, call in _calls.items() if ident != me and call.pid == pid]
    return (mine if mine is not None and mine.pid == pid else None), others


def calls_left_after(timeout: float) -> dict[int, PluginCall]:
    """Wait until no plugin call of this process runs, at most `timeout` seconds; the calls
    still running then, by their thread's ident. (A stopping server asks: a plugin whose
    decision ran past its deadline still runs in its own thread after its caller got the
    fallback, server/rpc/shutdown.py.)"""
    pid = os.getpid()

    def ours() -> dict[int, PluginCall]:
        return {ident: call for ident, call in _calls.items() if call.pid == pid}

    with _call_ended:
        _call_ended.wait_for(lambda: not ours(), timeout=max(timeout, 0.0))
        return ours()


def name_the_plugins(how: str) -> None:
    """Log the plugin that ends the process by `how`: the current thread's plugin call; when
    another thread ends it (a thread a plugin started itself, or the server's own forced exit),
    every plugin call in progress; nothing when no plugin code runs."""
    mine, others = calls_in_progress()
    if mine is not None:
        log.critical("plugin ended the process", how=how, plugin=mine.name, group=mine.group,
                     call=mine.what)
    elif others:  # a plugin's own thread, or the server ending the process itself
        log.critical("process ends while plugin code runs", how=how,
                     plugins=sorted({c.name for c in others}),
                     plugin_calls_in_progress=[f"{c.group} {c.name}.{c.what}" for c in others])


def _watch(real: Callable[..., Any], label: str) -> Callable[..., NoReturn]:
    def watched(*args: Any) -> NoReturn:
        try:
            name_the_plugins(f"{label}({', '.join(map(repr, args))})")
        finally:
            real(*args)
        raise AssertionError("unreachable: the process has ended")  # pragma: no cover

    watched.__name__ = getattr(real, "__name__", label)
    watched.__doc__ = getattr(real, "__doc__", None)
    return watched


def watch_process_exits() -> None:
    """Put the watch on os._exit and os.abort, and enable faulthandler (once per process)."""
    global _watched
    with _lock:
        if _watched:
            return
        _watched = True
    os._exit = _watch(os._exit, "os._exit")
    os.abort = _watch(os.abort, "os.abort")
    if not faulthandler.is_enabled():
        faulthandler.enable()


# How often a wait on a plugin's thread looks at its deadline and its caller, seconds.
POLL_SECONDS = 0.05


class PluginRun:
    """One call into plugin code, run in a daemon thread of its own (`plugin_call` recorded):
    the thread that asked waits for it in slices (`wait`), so that a plugin that hangs costs
    its caller no more than its deadline, and one that outlives it holds one thread."""

    def __init__(self, group: str, name: str, what: str, call: Callable[[], Any],
                 thread_name: str) -> None:
        self._answer: list[Any] = []  # the call's value, or its exception, once it ended
        self._done = threading.Event()

        def run() -> None:
            try:
                with plugin_call(group, name, what):
                    self._answer.append(call())
            except BaseException as exc:  # handed to the waiting thread (`result`)
                self._answer.append(exc)
            finally:
                self._done.set()

        self.thread = threading.Thread(target=run, name=thread_name, daemon=True)
        self.thread.start()

    def wait(self, seconds_left: float) -> bool:
        """Wait at most one slice (or `seconds_left`, if less); whether the call has ended."""
        return self._done.wait(min(max(seconds_left, 0.0), POLL_SECONDS))

    def outcome(self) -> Any:
        """The call's value, or the exception it raised (once `wait` said it ended)."""
        return self._answer[0]
