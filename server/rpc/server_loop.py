"""The server's asyncio event loop, in a daemon thread of its own.

The gRPC server (grpc.aio) lives on this loop: every call's messages, the interceptors, health
and reflection. The code that starts and stops the server is synchronous (a command's main
thread, a test, an embedding program), and hands the loop its coroutines with `run`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
# Seconds the loop's own tasks (the overload watch, calls still ending) get to end at close.
CLOSE_SECONDS = 1.0


class ServerLoop:
    """An event loop running in a daemon thread until `close`."""

    def __init__(self, name: str = "hpcdispatch-grpc") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run `coroutine` on the loop; its result, once it is done (from another thread)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        """Start `coroutine` as a task of the loop; it is cancelled at `close`."""
        self.loop.call_soon_threadsafe(self.loop.create_task, coroutine)

    def close(self) -> None:
        """Cancel the loop's tasks, stop it and wait for its thread (each for a short while:
        a task that does not end is left behind, as is the daemon thread)."""
        if self.loop.is_closed():
            return
        if self.loop.is_running():
            with contextlib.suppress(TimeoutError):
                self.run(_cancel_tasks(), CLOSE_SECONDS + 1)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(CLOSE_SECONDS)
        if not self._thread.is_alive():
            self.loop.close()


async def _cancel_tasks() -> None:
    tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.wait(tasks, timeout=CLOSE_SECONDS)
