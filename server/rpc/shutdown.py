"""What still runs once the grace period is over, named, and the process's exit despite it.

A stop gives calls the grace period (server/rpc/app.py `RunningServer.stop`); a call then
still running is stuck in code that ignores its cancellation (a plugin that never returns),
a plugin's decision or prediction may still run in its own thread after its caller got the
fallback at the deadline (the guards, domain/plugin_calls.py), and a thread a plugin started
may never end. None may keep the process alive past its grace period (Kubernetes would SIGKILL
it, and a supervisor would see a hang), nor pass for a clean stop: `serve` names each in one
log line, where its code is, then exits at once with status 1.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Any

import structlog

from ..domain.plugin_calls import PluginCall
from .call_pool import where

log = structlog.get_logger("hpcdispatch.server")

# The exit status when work was left running (0 when the stop was clean).
EXIT_WORK_LEFT = 1


def lingering_threads() -> list[dict[str, str]]:
    """Threads other than the main one that would keep the interpreter from exiting (not
    daemon threads), each with where its code is."""
    frames = sys._current_frames()
    return [{"thread": t.name, "at": where(frames.get(t.ident or 0))}
            for t in threading.enumerate()
            if t is not threading.main_thread() and not t.daemon and t.is_alive()]


def plugin_calls(running: dict[int, PluginCall]) -> list[dict[str, str]]:
    """The plugin calls still `running` (by thread ident), each with where its code is."""
    frames = sys._current_frames()
    return [{"plugin": call.name, "group": call.group, "call": call.what,
             "at": where(frames.get(ident))}
            for ident, call in sorted(running.items(), key=lambda item: item[1].name)]


def exit_leaving(calls: list[dict[str, Any]], grace_seconds: float,
                 plugins_running: dict[int, PluginCall] | None = None) -> None:
    """Return when nothing is left running; otherwise log what is and exit the process now
    (without waiting for threads or running exit handlers: the stop is done). `calls`: what
    the pool's threads still work on; `plugins_running`: the plugin calls still running, by
    thread ident (domain/plugin_calls.py `calls_left_after`)."""
    threads = lingering_threads()
    plugins = plugin_calls(plugins_running or {})
    if not calls and not threads and not plugins:
        return
    log.error("work still running after the grace period; exiting without it",
              grace_s=grace_seconds, calls=calls or None, threads=threads or None,
              plugins=plugins or None)
    log.info("stopped", exit_status=EXIT_WORK_LEFT)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(EXIT_WORK_LEFT)
