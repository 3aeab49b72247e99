"""Every promise the book holds, as the room a CP decision protects (a `ProtectedRoom`).

After the book's step (`promises.keep_promises`) each promised job i holds s_i and the nodes of
its units over [s_i, s_i + d_i) in a node profile of the running work. The selected model then
decides what else starts now and when the unpromised jobs are planned, on capacity that holds
every promise:

- the pooled capacity over time of that profile (running work and promises, exact node by node
  and summed) is what HCP'19's and PCP'20's cumulatives and the list schedules plan on;
- PCP'19's per-node cumulatives hold each promise's units on its own nodes;
- a job started now may use on node n only what stays free there until its requested time
  (`NodeProfile.free_during(0, Job.at_most)`): PCP'20's position domains and every placement
  at t.

The profile is the problem at its limits (`problem.at_limits`: running work to its requested
time, each promise for its job's requested time). Jobs started now may not share a unit at t;
each takes no more than what the promises leave free until its own limit: so together they
never take a promise's room, and no promise moves later for a job started now whatever the
jobs' actual run times.

A job a site's rules restrict at t (E_i, or a window it would run into: `NodeProfile.usable`)
is fitted and placed on the profile itself, on its usable nodes only, not on the start pools
(which hold every node).
"""

from __future__ import annotations

import dataclasses
from collections import Counter

import numpy as np
import numpy.typing as npt

from ...domain.free_pool import FreePool, NodeMask, units_per_node
from ...domain.occupancy import MAX_MODEL_DURATION
from .capacity_profile import CapacityProfile
from .node_profile import NodeProfile
from .problem import Job, Problem
from .promises import Guard, fits_guarded, place_guarded
from .protected_room import NodeBlock, PooledBlock
from .start_pools import StartPools

# At most this many fixed blocks in a model's pooled cumulatives: the first steps after t as
# they are, the later ones merged by their largest use (a more cautious plan for later; what
# starts now is checked node by node anyway).
MAX_POOLED_BLOCKS = 256


class PromiseRoom:
    """The promises held after the book's step, protected from the jobs started now."""

    def __init__(self, profile: NodeProfile, guard: Guard | None,
                 ahead: dict[int, tuple[int, list[int]]], promised: frozenset[int]) -> None:
        self.profile = profile  # running work and every promise, taken
        self.guard = guard  # the oldest promise ahead, held against failing predictions
        self.ahead = ahead  # job index -> (s_i - t > 0, node of each unit)
        self.promised = promised  # every job holding a promise (due ones included)
        self._start_pools: StartPools | None = None
        # The pools `pool_for` made off the start pools, by job index, until the next start:
        # the same object for the same question (a model keys what it read by the pool).
        self._made: dict[int, FreePool] = {}

    def copy(self) -> PromiseRoom:
        return PromiseRoom(self.profile.copy(), self.guard, self.ahead, self.promised)

    # -- the pooled view ---------------------------------------------------------------------

    def pooled_steps(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """The pooled free amounts over time (step starts, amounts per step and type), with
        the running work and every promise held."""
        profile = self.profile
        return profile.times, np.maximum(profile.pooled, 0)

    def pooled_profile(self, problem: Problem) -> CapacityProfile:
        return CapacityProfile.from_steps(*self.pooled_steps())

    def pooled_fixed(self, problem: Problem) -> list[PooledBlock]:
        """What the running work and the promises use of the pooled capacity, as one fixed
        block per step (the last step, once everything has ended, uses none)."""
        times, free = self.pooled_steps()
        capacity = np.asarray(problem.up_capacity, dtype=np.int64)
        used = np.clip(capacity - free, 0, capacity)
        starts, ends, used = _merged(times, used)
        return [(s, e - s, tuple(u)) for s, e, u in
                zip(starts.tolist(), ends.tolist(), used.tolist(), strict=True) if any(u)]

    def node_fixed(self) -> list[NodeBlock]:
        jobs = self.profile.problem.jobs
        blocks: list[NodeBlock] = []
        for i, (start, nodes) in self.ahead.items():
            job = jobs[i]
            for n in sorted(set(nodes)):
                k = nodes.count(n)
                blocks.append((n, start, start + job.duration, tuple(k * r for r in job.req)))
        return blocks

    # -- starts at t -------------------------------------------------------------------------

    def _starts(self, job: Job, masked: bool = False) -> StartPools | None:
        """The pools of the jobs started now; None while some node is overfull, or where the
        site's rules restrict job i now and the caller cannot cut the pool to its nodes
        (`masked` False; each fit is then read off the profile, as `fits_guarded` does)."""
        if self.profile.overfull:
            return None
        if not masked and self._mask(job) is not None:
            return None
        if self._start_pools is None:
            guard = self.guard
            self._start_pools = StartPools(self.profile,
                                           guard.nodes if guard is not None else None)
        return self._start_pools

    def _mask(self, job: Job) -> NodeMask | None:
        """Where the site's rules let job i (at its limit) start now, as the start pools cut
        it (`Eligibility.now`: E_i less the windows over [0, requested_i)); None where they
        leave it every node."""
        rules = self.profile.problem.eligibility
        if rules is None:
            return None
        mask = rules.now(job.index)
        if mask is None and job.requested <= 0 and self.profile.usable(job, 0) is not None:
            return _EVERY_NODE_BUT_READ  # no requested time: the profile reads its run
        return mask

    def _started_off_the_pools(self, job: Job, nodes: list[int]) -> None:
        """A start placed on the profile itself (a job the rules restrict) updates the start
        pools too, where they are made and read still."""
        if self._start_pools is not None and not self.profile.overfull:
            self._start_pools.started(job, nodes)

    def _careful(self, job: Job) -> bool:
        guard = self.guard
        return guard is not None and guard.needs_care(job, 0)

    def pool_for(self, job: Job, free_now: FreePool) -> FreePool:
        """What job i may use on each node until its requested time (read-only)."""
        job = at_limit(job)
        starts = self._starts(job)
        if starts is not None:
            return starts.pool(job, self._careful(job))
        made = self._made.get(job.index)
        if made is not None:
            return made
        free = self.profile.free_for(job, 0)
        if self._careful(job):
            assert self.guard is not None
            free[self.guard.nodes] = 0
        np.maximum(free, 0, out=free)
        made = self._made[job.index] = FreePool.from_array(free, free_now.eligible,
                                                           free_now.scale)
        return made

    def fits(self, job: Job) -> bool:
        """Whether job i fits now until its requested time around every promise (on the
        nodes the site's rules let it start on)."""
        job = at_limit(job)
        mask = self._mask(job)
        starts = self._starts(job, masked=mask is not _EVERY_NODE_BUT_READ)
        if starts is None:
            return fits_guarded(self.profile, job, 0, self.guard)
        pool = starts.pool(job, self._careful(job))
        if mask is not None:
            return pool.choose(job.req, job.units, False, mask) is not None
        return pool.units_fit(job.req, job.units) >= job.units

    def place(self, free_now: FreePool, job: Job, first_fit: bool) -> list[int] | None:
        limited = at_limit(job)
        mask = self._mask(limited)
        starts = self._starts(limited, masked=mask is not _EVERY_NODE_BUT_READ)
        if starts is None:
            if not fits_guarded(self.profile, limited, 0, self.guard):
                return None
            nodes = place_guarded(self.profile, limited, 0, self.guard, first_fit)
            self._started_off_the_pools(limited, nodes)
        else:
            # The free pool's rule on what the job may use until its limit: the nodes
            # `place_guarded` chooses on the same amounts.
            chosen = starts.pool(limited, self._careful(limited)).choose(
                job.req, job.units, first_fit, mask)
            if chosen is None:
                return None
            nodes = chosen
            self.profile.take(limited, 0, nodes, fits=True)
            starts.started(limited, nodes)
        free_now.take_all(nodes, job.req)
        self._made.clear()
        return nodes

    def take(self, free_now: FreePool, nodes: list[int], job: Job) -> None:
        self._made.clear()
        limited = at_limit(job)
        starts = self._starts(limited)
        if starts is None:
            self.profile.take(limited, 0, nodes)
            self._started_off_the_pools(limited, nodes)
            return
        # Within what its pool leaves it until its limit, the start overfills no node: the
        # profile need not read the run again to know.
        pool = starts.pool(limited, self._careful(limited)).free
        fits = all(units_per_node(pool[n], job.req) >= k for n, k in Counter(nodes).items())
        self.profile.take(limited, 0, nodes, fits=fits)
        starts.started(limited, nodes)

    def keeps(self, job: Job, nodes: list[int]) -> bool:
        """Whether job i started now on `nodes` leaves every promise its room until its
        requested time (the check a model's placement passes before it is a decision)."""
        job = at_limit(job)
        if not self.profile.fits_on(job, 0, nodes):
            return False
        guard = self.guard
        return guard is None or not guard.needs_care(job, 0) or not guard.nodes[nodes].any()

    def held_jobs(self) -> frozenset[int]:
        return self.promised

    def fill_order(self, job: Job) -> int:
        return -job.duration  # the longer the run, the less stays free during all of it


# A job the rules restrict that has no requested time: not cut from the start pools (their
# mask reads windows up to the requested time), but read off the profile.
_EVERY_NODE_BUT_READ = NodeMask()


def at_limit(job: Job) -> Job:
    """Job i for its requested time (`Job.at_most`), as the promises are planned."""
    if job.duration >= job.at_most:
        return job
    return dataclasses.replace(job, duration=min(job.at_most, MAX_MODEL_DURATION))


def _merged(
    times: npt.NDArray[np.int64], used: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Steps (start, end, use) with at most MAX_POOLED_BLOCKS of them: the first half as they
    are, the later ones merged in runs by their largest use; the last step (open-ended, no
    use) is dropped."""
    starts, ends = times[:-1], times[1:]
    used = used[:-1]
    if len(starts) <= MAX_POOLED_BLOCKS:
        return starts, ends, used
    keep = MAX_POOLED_BLOCKS // 2
    later = len(starts) - keep
    stride = -(-later // (MAX_POOLED_BLOCKS - keep))
    first = np.arange(keep, len(starts), stride)
    merged_used = np.maximum.reduceat(used[keep:], first - keep, axis=0)
    merged_ends = ends[np.minimum(first + stride, len(starts)) - 1]
    return (np.concatenate((starts[:keep], starts[first])),
            np.concatenate((ends[:keep], merged_ends)),
            np.concatenate((used[:keep], merged_used)))
