"""A decision's control: its search settings, deadline and allocator, whether the caller is
still there, and who asks."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .caller_scope import CallerScope
from .search_settings import SearchSettings


@dataclass(frozen=True, slots=True)
class SearchControl:
    settings: SearchSettings
    deadline: float  # time.monotonic() value by which the decision must be ready
    first_fit: bool = False  # allocator of FCFS / EASY / HCP'19 (best fit otherwise)
    workers: int = 1  # CP-SAT search workers
    # True once the caller is gone (gRPC cancellation, client disconnect): stop at once.
    cancelled: Callable[[], bool] = field(default=lambda: False)
    # Who asks (set by the edge that authenticated the call): what a stateful dispatcher keeps
    # between decisions is kept per scope (dispatchers/planning/caller_scope.py).
    scope: CallerScope = field(default_factory=CallerScope)

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def should_stop(self) -> bool:
        """The decision's time is up or nobody waits for it any more: abandon the work."""
        return self.remaining() <= 0 or self.cancelled()
