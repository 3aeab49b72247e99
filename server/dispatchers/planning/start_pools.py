"""What a job started now may use, node by node, until its requested time, around the holds.

A job i started at t runs at most until its limit t + d_i (its requested time), so on node n
it may use the least free amount over [0, d_i) (`NodeProfile.free_during`). Work only ends
between now and then, so that least is what is free now on every node no hold takes from
later (`NodeProfile.takes_after(0)`: a promise's start), and only on the few nodes a hold takes
from later does it depend on d_i: there it depends only on which of those takes fall before
d_i (after the last of them, only releases and hold ends follow, which add). So one pool per
count of takes before d_i answers for every job (`key`): the free pool of now, with the taken
nodes' least amounts over the run set in. A start updates the pools where it landed: by its
amounts on the nodes nothing takes from later (their least is what is free now), read again
on the others.

The pools give the placement the free pool's rule gives on those amounts
(`FreePool.choose`, the same as `choose_from_array` on the arrays), without reading every node
for every job: a pass over thousands of queued jobs at 10,000 nodes costs the groups of free
vectors, not the nodes × the jobs.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ...domain.free_pool import FreePool
from .node_profile import NodeProfile, node_counts
from .problem import Job

Key = tuple[int, bool]  # (takes before d_i, off the guard's nodes)


class StartPools:
    """Per `Key`, what a job started now may use until its limit, kept up to date."""

    def __init__(self, profile: NodeProfile, guard_nodes: npt.NDArray[np.bool_] | None) -> None:
        self.profile = profile
        problem = profile.problem
        self._eligible, self._scale = problem.free_now.eligible, problem.free_now.scale
        take_times, take_nodes = profile.takes_after(0)
        self._take_times = np.sort(take_times)
        self._taken = np.unique(take_nodes)  # the nodes a hold takes from later
        self._is_taken = np.zeros(len(problem.node_ids), dtype=bool)
        self._is_taken[self._taken] = True
        self._guard = guard_nodes
        self._pools: dict[Key, tuple[int, FreePool]] = {}  # key -> (a d_i of it, pool)
        self._now: FreePool | None = None

    def _free_now(self) -> FreePool:
        if self._now is None:
            free = self.profile.free_at(0)
            np.maximum(free, 0, out=free)
            self._now = FreePool.from_array(free, self._eligible, self._scale)
        return self._now

    def key(self, job: Job, careful: bool) -> Key:
        """The pool of job i (for its requested time, `at_limit`): by the takes before d_i."""
        return int(self._take_times.searchsorted(job.duration, side="left")), careful

    def pool(self, job: Job, careful: bool) -> FreePool:
        """What job i (for its requested time) may use now, node by node, until its limit;
        off the guard's nodes when `careful`. Read-only for the caller."""
        key = self.key(job, careful)
        kept = self._pools.get(key)
        if kept is not None:
            return kept[1]
        pool = self._free_now().copy()
        if key[0]:
            self._read_again(pool, job.duration, self._taken)
        if careful:
            assert self._guard is not None
            zero = (0,) * len(self._scale)
            for n in np.flatnonzero(self._guard & np.asarray(self._eligible)).tolist():
                pool.set(n, zero)
        self._pools[key] = (job.duration, pool)
        return pool

    def _read_again(self, pool: FreePool, duration: int, rows: npt.NDArray[np.int64]) -> None:
        """Set the least free amounts over [0, duration) of the nodes `rows` into `pool`."""
        if not len(rows):
            return
        least = self.profile.least_on(0, duration, rows)
        np.maximum(least, 0, out=least)
        for n, vec in zip(rows.tolist(), map(tuple, least.tolist()), strict=True):
            pool.set(n, vec)

    def started(self, job: Job, nodes: list[int]) -> None:
        """Job i (for its requested time) started now on `nodes`, already taken in the
        profile: every pool follows."""
        touched, units = node_counts(nodes)
        counts = dict(zip(touched.tolist(), units.tolist(), strict=True))
        plain = touched[~self._is_taken[touched]].tolist()
        read = touched[self._is_taken[touched]]
        req = job.req
        guard = self._guard
        for key, (duration, pool) in self._pools.items():
            off = guard if key[1] and guard is not None else None  # stays empty there
            for n in plain:
                if off is None or not off[n]:
                    pool.take(n, req, counts[n])
            mine = read if off is None else read[~off[read]]
            if key[0]:
                self._read_again(pool, duration, mine)
            else:  # no take before d_i: the least is what is free now
                for n in mine.tolist():
                    pool.take(n, req, counts[n])
        if self._now is not None:
            for n in touched.tolist():
                self._now.take(n, req, counts[n])
