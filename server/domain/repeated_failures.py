"""Which repeats of a failure are worth a log line: the first (with its traceback), then the
10th, 100th, 1000th, ... of the same kind, with the count so far.

A plugin that raises at every decision would otherwise write a traceback per decision (a
300-job replay: 500 tracebacks, half a megabyte of log) and bury everything else; the metrics
count every one of them.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable


class RepeatedFailures:
    """Counts of failures by kind (a dispatcher's name and reason, say)."""

    def __init__(self) -> None:
        self._counts: dict[Hashable, int] = {}
        self._lock = threading.Lock()

    def count(self, kind: Hashable) -> int:
        """Count one more failure of `kind`; returns how many there were so far (1: the
        first)."""
        with self._lock:
            seen = self._counts[kind] = self._counts.get(kind, 0) + 1
        return seen

    @staticmethod
    def worth_a_line(seen: int) -> bool:
        """The first failure of a kind, and the 10th, 100th, ... repeat."""
        while seen % 10 == 0:
            seen //= 10
        return seen == 1
