"""Admission control for decisions: a few at a time, the rest wait only while they can finish.

A decision is CPU-bound (Python for the snapshot, CP-SAT for the search). On a machine with c
cores, more than about c decisions at once do not finish more decisions per second; they make
every one of them slower, until none finishes before its caller's deadline (32 callers with 2 s
deadlines on 2 cores got no decision at all). So:

- `slots` decisions run at once; the others wait in arrival order (FIFO);
- each kind of dispatcher has a measured cost: an exponentially weighted mean of the seconds
  its decisions held a slot;
- a request is refused at once (RESOURCE_EXHAUSTED, so the client backs off or goes to another
  replica) when the decisions ahead of it and its own cost would end after its deadline, and a
  waiting request leaves the queue the moment it no longer could, or its caller has gone.

Work is then spent only on decisions somebody still waits for, and goodput under overload stays
near what the machine does at its capacity.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

# Weight of the newest measurement in a dispatcher's mean cost.
COST_SMOOTHING = 0.2
# How often a waiting request looks again at its deadline and its caller (seconds).
WAIT_POLL_SECONDS = 0.05


class Refused(Exception):
    """The request would not be decided before its deadline, or its caller went away."""

    def __init__(self, message: str, cancelled: bool = False) -> None:
        super().__init__(message)
        self.cancelled = cancelled


@dataclass(frozen=True, slots=True)
class Admitted:
    """A slot held by one decision: give it back with `DecisionAdmission.leave`."""

    kind: int
    entered: float  # time.monotonic() when the slot was taken
    waited: float  # seconds spent in the queue


class DecisionAdmission:
    """`slots` decisions at once; a FIFO queue of the others, each bounded by its deadline."""

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"decision slots must be >= 1, got {slots}")
        self.slots = slots
        self._busy = 0
        self._queue: deque[int] = deque()  # tickets of the waiting requests, oldest first
        self._tickets = itertools.count()
        self._cost: dict[int, float] = {}  # dispatcher kind -> mean seconds per decision
        self._recent_cost = 0.0  # mean seconds per decision, whatever the dispatcher
        self._refused_since_entry = False  # a deadline refusal since a decision last entered
        self._cond = threading.Condition()

    # -- what the queue looks like -------------------------------------------------------------

    @property
    def waiting(self) -> int:
        with self._cond:
            return len(self._queue)

    @property
    def busy(self) -> int:
        with self._cond:
            return self._busy

    @property
    def refusing(self) -> bool:
        """Every slot is busy and a request was refused for its deadline since a decision last
        got one: what comes now is refused too unless its deadline is far."""
        with self._cond:
            return self._busy >= self.slots and self._refused_since_entry

    def cost(self, kind: int) -> float:
        """Mean seconds a decision of this dispatcher holds a slot (0 before any was made)."""
        with self._cond:
            return self._cost.get(kind, 0.0)

    def _expected_start(self, ahead: int, now: float) -> float:
        """When a request with `ahead` requests before it in the queue may get a slot."""
        if self._busy < self.slots and ahead == 0:
            return now
        rounds = math.ceil((ahead + 1) / self.slots)  # whole decisions before ours, per slot
        return now + rounds * self._recent_cost

    # -- entering and leaving ------------------------------------------------------------------

    def enter(self, kind: int, deadline: float, cancelled: Callable[[], bool]) -> Admitted:
        """Wait for a slot; raises Refused when the decision could not be ready by `deadline`
        (a time.monotonic() value) or `cancelled()` becomes true while waiting."""
        arrived = time.monotonic()
        with self._cond:
            own = self._cost.get(kind, 0.0)
            start = self._expected_start(len(self._queue), arrived)
            if start + own > deadline:
                self._refused_since_entry = True
                raise Refused(
                    f"overloaded: {self._busy} decisions in progress and {len(self._queue)} "
                    f"waiting would not leave this one its ~{own:.3f} s before the deadline; "
                    "retry with backoff"
                )
            ticket = next(self._tickets)
            self._queue.append(ticket)
            try:
                while not (self._queue[0] == ticket and self._busy < self.slots):
                    now = time.monotonic()
                    if cancelled():
                        raise Refused("the caller cancelled while waiting", cancelled=True)
                    if now + self._cost.get(kind, 0.0) > deadline:
                        self._refused_since_entry = True
                        raise Refused(
                            f"overloaded: waited {now - arrived:.3f} s for a decision slot and "
                            "the deadline no longer leaves time to decide; retry with backoff"
                        )
                    self._cond.wait(WAIT_POLL_SECONDS)
            except Refused:
                self._queue.remove(ticket)
                self._cond.notify_all()  # the request behind may now be first
                raise
            self._queue.popleft()
            self._busy += 1
            self._refused_since_entry = False
            self._cond.notify_all()  # the next one may take a free slot too
            entered = time.monotonic()
            return Admitted(kind, entered, entered - arrived)

    def leave(self, admitted: Admitted, measure: bool = True) -> None:
        """Give the slot back; `measure`: the time it was held is this dispatcher's cost
        (not when the decision was abandoned part-way, which would understate it)."""
        held = time.monotonic() - admitted.entered
        with self._cond:
            self._busy -= 1
            if measure:
                old = self._cost.get(admitted.kind)
                self._cost[admitted.kind] = _smoothed(old, held)
                self._recent_cost = _smoothed(self._recent_cost or None, held)
            self._cond.notify_all()


def _smoothed(mean: float | None, value: float) -> float:
    return value if mean is None else (1 - COST_SMOOTHING) * mean + COST_SMOOTHING * value
