"""Stopping a long intake between chunks: the caller's deadline passed, or the caller went away.

Checking and converting a large snapshot (100,000 nodes, 200,000 jobs) is a loop in Python; the
loops call `tick(work)` with the work done since (items, units) and every CHUNK of work the
deadline and the caller are looked at, so an abandoned request stops within a chunk.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..pipeline import DecisionAbandoned

CHUNK = 4096  # items or units between two looks at the deadline and the caller


class Interruption:
    """`tick` raises DecisionAbandoned("convert") once `deadline` (time.monotonic(); None:
    none) has passed or `cancelled()` says the caller has gone."""

    def __init__(
        self, deadline: float | None = None, cancelled: Callable[[], bool] | None = None,
        chunk: int = CHUNK,
    ) -> None:
        self.deadline = deadline
        self.cancelled = cancelled
        self.chunk = chunk
        self._until_check = chunk

    def tick(self, work: int = 1) -> None:
        self._until_check -= work
        if self._until_check <= 0:
            self._until_check = self.chunk
            self.check()

    def check(self) -> None:
        if self.cancelled is not None and self.cancelled():
            raise DecisionAbandoned("convert", cancelled=True)
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise DecisionAbandoned("convert", cancelled=False)


NEVER = Interruption()  # an intake nobody interrupts (tests, benchmarks, the reference)
