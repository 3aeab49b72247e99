"""Planned starts for the jobs a decision leaves waiting: what `squeue --start` shows a user.

A pooled list schedule on a step function of free amounts (times relative to t, one row of
amounts per resource type per step, the last step for ever): each job in turn gets the
earliest start at which its pooled demand fits for all of d_i, and holds it there. A decision
reports up to m such estimates, each a short scan of a few hundred steps: plain lists, changed
in place (a boundary inserted where a job starts or ends), cost a fifth of array operations
at that size.
"""

from __future__ import annotations

from bisect import bisect_left
from operator import ge

import numpy as np
import numpy.typing as npt

from ...domain.free_pool import Vec


class StepPlan:
    """Pooled free amounts over time after t, taken from as jobs are planned."""

    __slots__ = ("free", "times")

    def __init__(self, times: npt.NDArray[np.int64], free: npt.NDArray[np.int64]) -> None:
        self.times: list[int] = np.asarray(times, dtype=np.int64).tolist()
        rows = np.asarray(free, dtype=np.int64).reshape(len(self.times), -1)
        self.free: list[list[int]] = rows.tolist()

    def _boundary(self, when: int) -> int:
        """Index of the step starting at `when` (created by splitting the one it falls in)."""
        times = self.times
        k = bisect_left(times, when)
        if k < len(times) and times[k] == when:
            return k
        times.insert(k, when)
        self.free.insert(k, list(self.free[k - 1]))
        return k

    def hold(self, demand: Vec, start: int, duration: int) -> None:
        """Take `demand` over [start, start + duration)."""
        first = self._boundary(start)
        stop = self._boundary(start + duration)
        for row in self.free[first:stop]:
            for r, amount in enumerate(demand):
                row[r] -= amount

    def hold_all(self, holds: list[tuple[Vec, int, int]]) -> None:
        """`hold` of every (demand, start, duration) of `holds`, at once: the same steps (every
        start and end a boundary) and amounts, without a pass over the steps per hold (the
        thousands of jobs a work-conserving decision starts at 10,000 nodes)."""
        if not holds:
            return
        times = np.asarray(self.times, dtype=np.int64)
        free = np.asarray(self.free, dtype=np.int64).reshape(len(times), -1)
        starts = np.fromiter((s for _, s, _ in holds), dtype=np.int64, count=len(holds))
        ends = starts + np.fromiter((d for _, _, d in holds), dtype=np.int64, count=len(holds))
        demands = np.asarray([d for d, _, _ in holds], dtype=np.int64).reshape(
            len(holds), free.shape[1])
        bounds = np.union1d(times, np.concatenate((starts, ends)))
        free = free[times.searchsorted(bounds, side="right") - 1]
        # Held amounts per step: + demand from its start's step, - from its end's step.
        change = np.zeros_like(free)
        np.add.at(change, bounds.searchsorted(starts), demands)
        np.subtract.at(change, bounds.searchsorted(ends), demands)
        free -= np.cumsum(change, axis=0)
        self.times, self.free = bounds.tolist(), free.tolist()

    def earliest(self, demand: Vec, duration: int) -> int:
        """The earliest step start from which `demand` fits for `duration` (the last step
        lasts for ever). Raises ValueError where it fits at no time."""
        times, free = self.times, self.free
        steps = len(times)
        k = 0
        while k < steps:
            if not all(map(ge, free[k], demand)):
                k += 1
                continue
            end = times[k] + duration
            j = k + 1
            while j < steps and times[j] < end and all(map(ge, free[j], demand)):
                j += 1
            if j == steps or times[j] >= end:
                return times[k]
            k = j + 1  # step j has no room: no window that starts before it holds
        raise ValueError("demand exceeds the pooled capacity at every time")

    def plan(self, demand: Vec, duration: int) -> int:
        """The earliest start at which `demand` fits for `duration`, held there."""
        start = self.earliest(demand, duration)
        self.hold(demand, start, duration)
        return start
