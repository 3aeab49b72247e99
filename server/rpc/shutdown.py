"""What still runs once the grace period is over, named, and the process's exit despite it.

A stop gives calls the grace period (server/rpc/app.py `RunningServer.stop`); a call then
still running is stuck in code that ignores its cancellation (a plugin that never returns),
and a thread a plugin started may never end. Neither may keep the process alive past its
grace period (Kubernetes would SIGKILL it, and a supervisor would see a hang): `serve` names
each in one log line, where its code is, then exits at once with status 1.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from typing import Any

import structlog

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


def exit_leaving(calls: list[dict[str, Any]], grace_seconds: float) -> None:
    """Return when nothing is left running; otherwise log what is and exit the process now
    (without waiting for threads or running exit handlers: the stop is done)."""
    threads = lingering_threads()
    if not calls and not threads:
        return
    log.error("work still running after the grace period; exiting without it",
              grace_s=grace_seconds, calls=calls or None, threads=threads or None)
    log.info("stopped", exit_status=EXIT_WORK_LEFT)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(EXIT_WORK_LEFT)
