"""Planned starts for the jobs a decision leaves waiting: what `squeue --start` shows a user.

A pooled list schedule on a step function of free amounts (times relative to t, one row of
amounts per resource type per step, the last step for ever): each job in turn gets the
earliest start at which its pooled demand fits for all of d_i, and holds it there. The steps
are kept as two arrays changed in place (a boundary inserted where a job starts or ends), so an
estimate costs a scan of the steps, not a rebuild of them: a decision reports up to m of them.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ...domain.free_pool import Vec
from .capacity_profile import first_room

Steps = npt.NDArray[np.int64]


class StepPlan:
    """Pooled free amounts over time after t, taken from as jobs are planned."""

    __slots__ = ("free", "times")

    def __init__(self, times: Steps, free: Steps) -> None:
        self.times = np.array(times, dtype=np.int64)  # own copies: changed in place
        self.free = np.array(free, dtype=np.int64).reshape(len(self.times), -1)

    def _boundary(self, when: int) -> int:
        """Index of the step starting at `when` (created by splitting the one it falls in)."""
        k = int(self.times.searchsorted(when, side="left"))
        if k < len(self.times) and self.times[k] == when:
            return k
        self.times = np.insert(self.times, k, when)
        self.free = np.insert(self.free, k, self.free[k - 1], axis=0)
        return k

    def hold(self, demand: Vec, start: int, duration: int) -> None:
        """Take `demand` over [start, start + duration)."""
        first = self._boundary(start)
        stop = self._boundary(start + duration)
        self.free[first:stop] -= np.asarray(demand, dtype=np.int64)

    def plan(self, demand: Vec, duration: int) -> int:
        """The earliest start at which `demand` fits for `duration`, held there."""
        start = first_room(self.times, self.free, demand, duration)
        self.hold(demand, start, duration)
        return start
