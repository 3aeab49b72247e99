"""Pooled free capacity over time: a step function of free amounts per resource type.

Times are relative to t (0 = now); step k holds from times[k] until times[k + 1], and the last
step lasts forever. Arrays keep the per-job queries linear in the number of steps and vectorised.

Most queries of a list schedule or a work-conserving pass on a large system are answered
without the arrays: `_floor` is a lower bound of the free amounts at every time (the least free
amount of any step, less every reservation not yet applied), and a demand within it fits at any
start. Reservations wait in `_pending` until a query needs the exact steps; they are then
applied together (the same step function as applying them one by one).
"""

from __future__ import annotations

from operator import le

import numpy as np
import numpy.typing as npt

from ...domain.free_pool import Vec


class CapacityProfile:
    __slots__ = ("_floor", "_free", "_pending", "_times")

    def __init__(self, free_now: Vec, releases: list[tuple[int, Vec]]) -> None:
        """`releases`: (time > 0, amounts freed at that time), e.g. running jobs' ends."""
        times = [0]
        steps = [list(free_now)]
        for when, amounts in sorted(releases):
            if when != times[-1]:
                times.append(when)
                steps.append(list(steps[-1]))
            step = steps[-1]
            for r, a in enumerate(amounts):
                step[r] += a
        self._times: npt.NDArray[np.int64] = np.asarray(times, dtype=np.int64)
        self._free: npt.NDArray[np.int64] = np.asarray(steps, dtype=np.int64).reshape(
            len(times), len(free_now))
        self._pending: list[tuple[Vec, int, int]] = []  # (demand, start, duration)
        self._floor: list[int] = self._free.min(axis=0).tolist()

    @classmethod
    def from_steps(cls, times: npt.NDArray[np.int64], free: npt.NDArray[np.int64]
                   ) -> CapacityProfile:
        """The profile whose step k holds free[k] from times[k] (times increasing from 0):
        what `CapacityProfile(free[0], releases)` makes of the releases free[k] - free[k - 1]
        at times[k], without them as Python tuples."""
        other = cls.__new__(cls)
        other._times = np.array(times, dtype=np.int64)
        other._free = np.array(free, dtype=np.int64).reshape(len(times), free.shape[1])
        other._pending = []
        other._floor = other._free.min(axis=0).tolist()
        return other

    def copy(self) -> CapacityProfile:
        """An independent profile with the same contents."""
        other = CapacityProfile.__new__(CapacityProfile)
        other._times = self._times.copy()
        other._free = self._free.copy()
        other._pending = list(self._pending)
        other._floor = list(self._floor)
        return other

    def _apply_pending(self) -> None:
        """Apply the waiting reservations to the steps, all at once."""
        pending = self._pending
        if not pending:
            return
        starts = np.fromiter((s for _, s, _ in pending), dtype=np.int64, count=len(pending))
        ends = starts + np.fromiter((d for _, _, d in pending), dtype=np.int64,
                                    count=len(pending))
        demands = np.asarray([d for d, _, _ in pending], dtype=np.int64).reshape(
            len(pending), self._free.shape[1])
        # Every start and end becomes a step boundary, as reserving one by one would make.
        times = np.union1d(self._times, np.concatenate((starts, ends)))
        free = self._free[self._times.searchsorted(times, side="right") - 1]
        # Reserved amounts per step: + demand from its start's step, - from its end's step.
        change = np.zeros_like(free)
        np.add.at(change, times.searchsorted(starts), demands)
        np.subtract.at(change, times.searchsorted(ends), demands)
        free -= np.cumsum(change, axis=0)
        self._times, self._free = times, free
        self._pending = []
        self._floor = free.min(axis=0).tolist()

    def starts_now(self, demand: Vec, duration: int) -> bool:
        """Whether `demand` fits over [0, duration): earliest_start(demand, duration) == 0."""
        if all(map(le, demand, self._floor)):  # within the lower bound: fits at any time
            return True
        self._apply_pending()
        return room_now(self._times, self._free, demand, duration)

    def earliest_start(self, demand: Vec, duration: int, not_before: int = 0) -> int:
        """Earliest start >= not_before at which `demand` fits for `duration` (`first_room`)."""
        if all(map(le, demand, self._floor)):  # within the lower bound: fits at any time
            return not_before
        self._apply_pending()
        return first_room(self._times, self._free, demand, duration, not_before)

    def reserve(self, demand: Vec, start: int, duration: int) -> None:
        """Hold `demand` over [start, start + duration) (applied when a query needs it)."""
        self._pending.append((demand, start, duration))
        floor = self._floor
        for r, d in enumerate(demand):
            if d > 0:  # a negative demand (a reservation given back) leaves the bound as it is
                floor[r] -= d


def room_now(
    times: npt.NDArray[np.int64], free: npt.NDArray[np.int64], demand: Vec, duration: int
) -> bool:
    """Whether `demand` fits over [0, duration) in the step function (times, free)."""
    before_end = int(times.searchsorted(duration, side="left"))  # steps before it
    return bool(np.all(free[:before_end] >= np.array(demand, dtype=np.int64)))


def first_room(
    times: npt.NDArray[np.int64],
    free: npt.NDArray[np.int64],
    demand: Vec,
    duration: int,
    not_before: int = 0,
) -> int:
    """Earliest start >= not_before at which `demand` fits for `duration` in the step function
    (times, free): step k holds free[k] from times[k] (times[0] <= not_before) until
    times[k + 1], the last one for ever.

    The start of a feasible window is `not_before` or a step boundary; a window is a run of
    consecutive steps with room, long enough for the duration. The last step must hold the
    demand (callers only ask for jobs that fit the whole pooled system).
    """
    first = int(times.searchsorted(not_before, side="right")) - 1
    room: npt.NDArray[np.bool_] = np.all(free[first:] >= np.array(demand, dtype=np.int64), axis=1)
    if room.all():  # room from not_before on, for ever
        return max(int(times[first]), not_before)
    steps = len(room)
    k = 0
    while k < steps:
        if not room[k]:
            blocked = room[k:].nonzero()[0]
            if not len(blocked):
                break
            k += int(blocked[0])
        start = max(int(times[first + k]), not_before)
        gaps = (~room[k:]).nonzero()[0]
        if not len(gaps):
            return start  # room until the last step, which lasts forever
        stop = k + int(gaps[0])
        if int(times[first + stop]) - start >= duration:
            return start
        k = stop
    raise ValueError("demand exceeds the pooled capacity at every time")
