"""Pooled free capacity over time: a step function of free amounts per resource type.

Times are relative to t (0 = now); step k holds from times[k] until times[k + 1], and the last
step lasts forever. Arrays keep the per-job queries linear in the number of steps and vectorised.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from hpcdispatch.server.dispatchers.free_pool import Vec


class CapacityProfile:
    def __init__(self, free_now: Vec, releases: list[tuple[int, Vec]]) -> None:
        """`releases`: (time > 0, amounts freed at that time), e.g. running jobs' ends."""
        times = [0]
        steps = [np.asarray(free_now, dtype=np.int64)]
        for when, amounts in sorted(releases):
            if when != times[-1]:
                times.append(when)
                steps.append(steps[-1].copy())
            steps[-1] += np.asarray(amounts, dtype=np.int64)
        self.times: npt.NDArray[np.int64] = np.asarray(times, dtype=np.int64)
        self.free: npt.NDArray[np.int64] = np.vstack(steps).reshape(len(times), len(free_now))

    def _split(self, when: int) -> int:
        """Index of the step that starts exactly at `when`, creating it if needed."""
        times, free = self.times, self.free
        i = int(times.searchsorted(when, side="right")) - 1
        if times[i] == when:
            return i
        cut = i + 1
        self.times = np.concatenate((times[:cut], np.array([when], dtype=np.int64), times[cut:]))
        self.free = np.concatenate((free[:cut], free[i:cut], free[cut:]))
        return cut

    def earliest_start(self, demand: Vec, duration: int, not_before: int = 0) -> int:
        """Earliest start >= not_before at which `demand` fits for `duration`.

        The start of a feasible window is `not_before` or a step boundary; a window is a run of
        consecutive steps with room, long enough for the duration. The last step must hold the
        demand (callers only ask for jobs that fit the whole pooled system).
        """
        first = int(self.times.searchsorted(not_before, side="right")) - 1
        room: npt.NDArray[np.bool_] = np.all(
            self.free[first:] >= np.array(demand, dtype=np.int64), axis=1)
        if room.all():  # room from not_before on, for ever
            return max(int(self.times[first]), not_before)
        steps = len(room)
        k = 0
        while k < steps:
            if not room[k]:
                blocked = np.flatnonzero(room[k:])
                if not len(blocked):
                    break
                k += int(blocked[0])
            start = max(int(self.times[first + k]), not_before)
            gaps = np.flatnonzero(~room[k:])
            if not len(gaps):
                return start  # room until the last step, which lasts forever
            stop = k + int(gaps[0])
            if int(self.times[first + stop]) - start >= duration:
                return start
            k = stop
        raise ValueError("demand exceeds the pooled capacity at every time")

    def reserve(self, demand: Vec, start: int, duration: int) -> None:
        i = self._split(start)
        j = self._split(start + duration)
        self.free[i:j] -= np.array(demand, dtype=np.int64)
