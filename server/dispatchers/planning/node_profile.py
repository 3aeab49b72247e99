"""Free amounts per node and resource type over time after t: the plan of conservative backfilling.

A step function: step k holds from times[k] until times[k + 1] (relative to t, 0 = now), and
the last step lasts forever. It starts as what is free now plus the predicted releases of the
running work, and each reservation takes its units from the steps it spans. Arrays of shape
(steps, nodes, resource types) keep a fit test over a job's whole run vectorised; the pooled
view (`CapacityProfile`, the sum over nodes) finds candidate start times first, since a job
that does not fit the pooled capacity cannot fit node by node.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .capacity_profile import CapacityProfile
from .free_pool import FreePool
from .problem import Job, Problem
from .stopping import StopCheck, never, stop_if

Counts = npt.NDArray[np.int64]


class NodeProfile:
    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        eligible = np.asarray(problem.eligible, dtype=bool)
        shape = (len(problem.node_ids), len(problem.resources))
        now = np.asarray(problem.free_now.free, dtype=np.int64).reshape(shape)
        now[~eligible] = 0  # nodes that are not up never receive work
        times = [0]
        steps = [now]
        for end, blocks in problem.releases_by_time():  # eligible nodes only, ends >= 1
            step = steps[-1].copy()
            for b in blocks:
                step[b.node] += np.asarray(b.amounts, dtype=np.int64)
            times.append(end)
            steps.append(step)
        self.times: npt.NDArray[np.int64] = np.asarray(times, dtype=np.int64)
        self.free: npt.NDArray[np.int64] = np.stack(steps)
        pooled = self.free.sum(axis=1)
        self.pooled = CapacityProfile(
            tuple(int(a) for a in pooled[0]),
            [
                (int(when), tuple(int(a) for a in row))
                for when, row in zip(self.times[1:], np.diff(pooled, axis=0), strict=True)
            ],
        )

    def _steps(self, start: int, end: int) -> tuple[int, int]:
        """Indices [first, stop) of the steps that overlap [start, end)."""
        first = int(np.searchsorted(self.times, start, side="right")) - 1
        stop = int(np.searchsorted(self.times, end, side="left"))
        return first, max(stop, first + 1)

    def _split(self, when: int) -> int:
        """Index of the step that starts exactly at `when`, creating it if needed."""
        i = int(np.searchsorted(self.times, when, side="right")) - 1
        if self.times[i] == when:
            return i
        self.times = np.insert(self.times, i + 1, when)
        self.free = np.insert(self.free, i + 1, self.free[i], axis=0)
        return i + 1

    def free_during(self, start: int, end: int) -> npt.NDArray[np.int64]:
        """Per node and type, the least free amount over [start, end): (nodes, types)."""
        first, stop = self._steps(start, end)
        result: npt.NDArray[np.int64] = self.free[first:stop].min(axis=0)
        return result

    @staticmethod
    def units_fitting(free: npt.NDArray[np.int64], job: Job) -> Counts:
        """Units of job i that fit on each node into `free` (one unit never spans nodes)."""
        req = np.asarray(job.req, dtype=np.int64)
        asked = req > 0
        if not asked.any():
            return np.zeros(free.shape[0], dtype=np.int64)
        fit: Counts = (free[:, asked] // req[asked]).min(axis=1)
        return fit

    def earliest(self, job: Job, should_stop: StopCheck = never) -> int:
        """Earliest start s >= 0 (relative to t) at which rn_i units of job i fit node by node
        for all of d_i. Raises Stopped when `should_stop()` turns true (once per candidate)."""
        not_before = 0
        demand = job.demand()
        while True:
            stop_if(should_stop, "conservative reservation")
            start = self.pooled.earliest_start(demand, job.duration, not_before)
            free = self.free_during(start, start + job.duration)
            if int(self.units_fitting(free, job).sum()) >= job.units:
                return start
            later = self.times[self.times > start]
            # Past the last step nothing changes any more: the pooled test was exact there
            # only if nodes can hold the job, which `never_fits` checked before.
            if not len(later):
                raise AssertionError("a job that fits an empty system must fit once all ends")
            not_before = int(later[0])

    def place(self, job: Job, start: int, first_fit: bool = False) -> list[int]:
        """Nodes of job i's units for a run from `start` (one entry per unit), by the pool's
        rule (best fit or first fit) over what stays free for all of d_i; taken here."""
        end = start + job.duration
        free = self.free_during(start, end)
        pool = FreePool(
            [tuple(row) for row in free.tolist()],  # Python ints, converted in C
            self.problem.eligible,
            self.problem.free_now.scale,
        )
        nodes = pool.choose(job.req, job.units, first_fit)
        if nodes is None:
            raise AssertionError("place called where the job does not fit")
        self.take(job, start, nodes)
        return nodes

    def checkpoint(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], CapacityProfile]:
        """The profile's state, for `restore`."""
        return self.times.copy(), self.free.copy(), self.pooled.copy()

    def restore(
        self, state: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], CapacityProfile]
    ) -> None:
        self.times, self.free, self.pooled = state

    def fits_at(self, job: Job, start: int) -> bool:
        """Whether rn_i units of job i fit node by node over [start, start + d_i)."""
        free = self.free_during(start, start + job.duration)
        return int(self.units_fitting(free, job).sum()) >= job.units

    def _counts(self, nodes: list[int]) -> Counts:
        return np.bincount(np.asarray(nodes, dtype=np.int64), minlength=self.free.shape[1])

    def fits_on(self, job: Job, start: int, nodes: list[int]) -> bool:
        """Whether job i's units fit on `nodes` (one entry per unit) for a run from `start`."""
        if len(nodes) != job.units or not all(
            0 <= n < self.free.shape[1] and self.problem.eligible[n] for n in nodes
        ):
            return False
        free = self.free_during(start, start + job.duration)
        need = self._counts(nodes)[:, None] * np.asarray(job.req, dtype=np.int64)[None, :]
        return bool(np.all(free >= need))

    def take(self, job: Job, start: int, nodes: list[int], sign: int = 1) -> None:
        """Hold job i's units on `nodes` over [start, start + d_i) (`sign` -1: give them back)."""
        end = start + job.duration
        first, stop = self._split(start), self._split(end)
        self.free[first:stop] -= sign * (
            self._counts(nodes)[:, None] * np.asarray(job.req, dtype=np.int64)[None, :])
        self.pooled.reserve(tuple(sign * a for a in job.demand()), start, job.duration)

    def give_back(self, job: Job, start: int, nodes: list[int]) -> None:
        """Undo `take(job, start, nodes)`."""
        self.take(job, start, nodes, sign=-1)
