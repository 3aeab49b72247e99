"""Pooled free capacity over time: a step function of free amounts per resource type.

Times are relative to t (0 = now). The last step lasts forever.
"""

from __future__ import annotations

import bisect

from hpcdispatch.server.dispatchers.free_pool import Vec


class CapacityProfile:
    def __init__(self, free_now: Vec, releases: list[tuple[int, Vec]]) -> None:
        """`releases`: (time > 0, amounts freed at that time), e.g. running jobs' ends."""
        self.times: list[int] = [0]
        self.free: list[list[int]] = [list(free_now)]
        for when, amounts in sorted(releases):
            if when != self.times[-1]:
                self.times.append(when)
                self.free.append(list(self.free[-1]))
            step = self.free[-1]
            for r, a in enumerate(amounts):
                step[r] += a

    def _split(self, when: int) -> int:
        """Index of the step that starts exactly at `when`, creating it if needed."""
        i = bisect.bisect_right(self.times, when) - 1
        if self.times[i] == when:
            return i
        self.times.insert(i + 1, when)
        self.free.insert(i + 1, list(self.free[i]))
        return i + 1

    def fits(self, demand: Vec, start: int, duration: int) -> bool:
        i = bisect.bisect_right(self.times, start) - 1
        end = start + duration
        while i < len(self.times) and self.times[i] < end:
            if any(f < d for f, d in zip(self.free[i], demand, strict=True)):
                return False
            i += 1
        return True

    def earliest_start(self, demand: Vec, duration: int, not_before: int = 0) -> int:
        """Earliest start >= not_before at which `demand` fits for `duration`.

        Candidate starts are `not_before` and the step boundaries after it. The last step must
        hold the demand (callers only ask for jobs that fit the whole pooled system).
        """
        first = bisect.bisect_right(self.times, not_before) - 1
        candidates = [not_before, *self.times[first + 1 :]]
        for start in candidates:
            if self.fits(demand, start, duration):
                return start
        raise ValueError("demand exceeds the pooled capacity at every time")

    def reserve(self, demand: Vec, start: int, duration: int) -> None:
        i = self._split(start)
        j = self._split(start + duration)
        for k in range(i, j):
            step = self.free[k]
            for r, d in enumerate(demand):
                step[r] -= d
