"""Admission control for decisions: a few at a time, shared fairly between client identities,
the rest wait only while they can finish.

A decision is CPU-bound (Python for the snapshot, CP-SAT for the search). On a machine with c
cores, more than about c decisions at once do not finish more decisions per second; they make
every one of them slower, until none finishes before its caller's deadline (32 callers with 2 s
deadlines on 2 cores got no decision at all). So:

- `slots` decisions run at once; the others wait;
- the waiting are taken max-min fairly: when a slot frees, the request of the identity with the
  fewest decisions running goes first (arrival order between equals; with one identity, as
  without client certificates, plain first come, first served);
- an identity with no decision running starts its decision at once, beside the slots when they
  are all busy (its own slot): a decision is not preempted, so without it any set of
  identities whose decisions hold every slot would take every decision from another. The
  decision threads (server/rpc/decision_threads.py) bound how many can run at once;
- each (dispatcher, profile) has a measured cost (`CostBook`): an exponentially weighted mean
  of the seconds its decisions held a slot, which also fades with time (halved every
  COST_HALF_LIFE_SECONDS without a decision of its kind), so that one slow decision is not
  held against the next for ever;
- a request that has to wait is refused at once (RESOURCE_EXHAUSTED, so the client backs off or
  goes to another replica) when the decisions ahead of it and its own cost would end after its
  deadline, and a waiting request leaves the queue the moment it no longer could, or its
  caller has gone. A request that gets a slot at once is never refused for its cost: its
  search is cut at its deadline anyway, and an idle server refusing would answer nothing.

Work is then spent only on decisions somebody still waits for, and goodput under overload stays
near what the machine does at its capacity.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

# Weight of the newest measurement in a (dispatcher, profile)'s mean cost.
COST_SMOOTHING = 0.2
# A mean cost not measured again for this long counts half as much (seconds).
COST_HALF_LIFE_SECONDS = 60.0
# How often a waiting request looks again at its deadline and its caller (seconds).
WAIT_POLL_SECONDS = 0.05

# What a cost is kept for: (dispatcher kind, profile name).
CostKey = tuple[int, str]


class Refused(Exception):
    """The request would not be decided before its deadline, or its caller went away."""

    def __init__(self, message: str, cancelled: bool = False) -> None:
        super().__init__(message)
        self.cancelled = cancelled


class CostBook:
    """Mean seconds a decision holds a slot, per (dispatcher, profile) and over all of them:
    exponentially weighted over decisions, and halved every `half_life` seconds of `clock`
    without one (a fading memory: module doc)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 half_life: float = COST_HALF_LIFE_SECONDS) -> None:
        self.clock = clock
        self.half_life = half_life
        self._means: dict[CostKey | None, tuple[float, float]] = {}  # key -> (mean, when)

    def estimate(self, key: CostKey | None) -> float:
        """The mean cost of `key` now (None: of any decision); 0 before any was measured."""
        if key not in self._means:
            return 0.0
        mean, when = self._means[key]
        return mean * 0.5 ** (max(self.clock() - when, 0.0) / self.half_life)

    def record(self, key: CostKey, seconds: float) -> None:
        """A decision of `key` held its slot `seconds`."""
        now = self.clock()
        for k in (key, None):
            old = self.estimate(k) if k in self._means else None
            self._means[k] = (_smoothed(old, seconds), now)


@dataclass(frozen=True, slots=True)
class Admitted:
    """A slot held by one decision: give it back with `DecisionAdmission.leave`."""

    key: CostKey
    identity: str
    entered: float  # time.monotonic() when the slot was taken
    waited: float  # seconds spent in the queue


@dataclass(frozen=True, slots=True)
class _Waiting:
    ticket: int  # arrival order
    identity: str


class DecisionAdmission:
    """`slots` decisions at once; the others wait, taken max-min fairly between identities,
    each bounded by its deadline (module doc)."""

    def __init__(self, slots: int, costs: CostBook | None = None) -> None:
        if slots < 1:
            raise ValueError(f"decision slots must be >= 1, got {slots}")
        self.slots = slots
        self.costs = costs or CostBook()
        self._busy = 0
        self._running: Counter[str] = Counter()  # decisions running, by identity
        self._queue: list[_Waiting] = []  # the waiting requests, in arrival order
        self._tickets = itertools.count()
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
        got one: what comes now is refused too unless its deadline is far (or it is the first
        of its identity: its own slot)."""
        with self._cond:
            return self._busy >= self.slots and self._refused_since_entry

    def cost(self, kind: int, profile: str = "") -> float:
        """Mean seconds a decision of this dispatcher and profile holds a slot now (0 before
        any was made)."""
        with self._cond:
            return self.costs.estimate((kind, profile))

    def _first(self) -> _Waiting:
        """The waiting request a free slot goes to: its identity runs the fewest decisions;
        the earliest of those."""
        return min(self._queue, key=lambda w: (self._running[w.identity], w.ticket))

    def _ahead(self, identity: str) -> int:
        """Waiting requests that a new one of `identity` would go after (as things stand)."""
        mine = self._running[identity]
        return sum(1 for w in self._queue if self._running[w.identity] <= mine)

    def _may_enter(self, waiting: _Waiting) -> bool:
        if self._running[waiting.identity] == 0:  # its own slot, for its earliest request
            return next(w for w in self._queue if w.identity == waiting.identity) == waiting
        return self._busy < self.slots and self._first() == waiting

    def _expected_start(self, ahead: int, now: float) -> float:
        """When a request with `ahead` requests before it may get a slot (all of them busy)."""
        rounds = math.ceil((ahead + 1) / self.slots)  # whole decisions before ours, per slot
        return now + rounds * self.costs.estimate(None)

    # -- entering and leaving ------------------------------------------------------------------

    def enter(self, key: CostKey, deadline: float, cancelled: Callable[[], bool],
              identity: str = "") -> Admitted:
        """Wait for a slot for a decision of `key` (dispatcher kind, profile) for `identity`;
        raises Refused when it would have to wait and could not be ready by `deadline` (a
        time.monotonic() value), or `cancelled()` becomes true while waiting."""
        arrived = time.monotonic()
        with self._cond:
            waiting = _Waiting(next(self._tickets), identity)
            self._queue.append(waiting)
            if not self._may_enter(waiting):
                own = self.costs.estimate(key)
                ahead = self._ahead(identity) - 1
                if self._expected_start(ahead, arrived) + own > deadline:
                    self._queue.remove(waiting)
                    self._refused_since_entry = True
                    raise Refused(
                        f"overloaded: {self._busy} decisions in progress and {ahead} waiting "
                        f"ahead would not leave this one its ~{own:.3f} s before the deadline; "
                        "retry with backoff")
            try:
                while not self._may_enter(waiting):
                    now = time.monotonic()
                    if cancelled():
                        raise Refused("the caller cancelled while waiting", cancelled=True)
                    if now + self.costs.estimate(key) > deadline:
                        self._refused_since_entry = True
                        raise Refused(
                            f"overloaded: waited {now - arrived:.3f} s for a decision slot and "
                            "the deadline no longer leaves time to decide; retry with backoff"
                        )
                    self._cond.wait(WAIT_POLL_SECONDS)
            except Refused:
                self._queue.remove(waiting)
                self._cond.notify_all()  # the request behind may now be first
                raise
            self._queue.remove(waiting)
            self._busy += 1
            self._running[identity] += 1
            self._refused_since_entry = False
            self._cond.notify_all()  # the next one may take a free slot too
            entered = time.monotonic()
            return Admitted(key, identity, entered, entered - arrived)

    def leave(self, admitted: Admitted, measure: bool = True) -> None:
        """Give the slot back; `measure`: the time it was held is its (dispatcher, profile)'s
        cost (not when the decision was abandoned part-way, which would understate it)."""
        held = time.monotonic() - admitted.entered
        with self._cond:
            self._busy -= 1
            self._running[admitted.identity] -= 1
            if self._running[admitted.identity] <= 0:
                del self._running[admitted.identity]
            if measure:
                self.costs.record(admitted.key, held)
            self._cond.notify_all()


def _smoothed(mean: float | None, value: float) -> float:
    return value if mean is None else (1 - COST_SMOOTHING) * mean + COST_SMOOTHING * value
