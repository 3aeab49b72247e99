"""The most processors now without delaying the head: LOS's Reservation_DP (Shmueli & Feitelson
2005), shared by the `los` baseline and the CP dispatchers' `capacity_first` knob.

Of the candidate jobs, the set that maximises Σ n_i started now, subject to

- Σ n_i <= the processors free now, and
- Σ n_i over the jobs still running at τ (d_i > τ) <= the processors the head's reservation
  leaves free at τ ("extra"), so the head's start is never delayed.

A dynamic programme over processors (for each count used now, the fewest used past τ) finds the
set exactly in the pooled view; node by node it may not all fit, so callers place it and keep
what fits. n_i is rn_i x cores per unit (`job_orders.processors`); on a system whose resources
include no "core", n_i is rn_i and only the placement bounds the set. On systems of more than
MAX_DP_PROCESSORS free processors the programme counts processors in blocks (n_i rounded up,
capacities down), which keeps it exact about never delaying the head but may pack a little less.

Around every promise of the book (a `promise_room.PromiseRoom`, many protected blocks instead of
one head) the set is packed greedily instead, most processors first, on the pooled capacity over
time the promises leave: a job joins when it fits there for all of its d_i.
"""

from __future__ import annotations

import numpy as np

from ...domain.free_pool import FreePool
from .job_orders import CORE, processors
from .plan import Plan
from .problem import Job, Problem
from .protected_room import ProtectedRoom
from .reservation import Reservation

MAX_DP_PROCESSORS = 100_000  # beyond this, the programme counts processors in blocks


def pack(jobs: list[tuple[int, bool]], now: int, extra: int) -> list[int]:
    """Indices into `jobs` ((n_i, runs past τ) each) of a set with the largest Σ n_i such that
    Σ n_i <= `now` and Σ n_i of the jobs running past τ <= `extra`."""
    if now <= 0 or not jobs:
        return []
    block = -(-now // MAX_DP_PROCESSORS)
    cap = now // block
    inf = np.iinfo(np.int64).max // 4
    past = np.full(cap + 1, inf, dtype=np.int64)  # fewest processors past τ for each count now
    past[0] = 0
    taken: list[np.ndarray] = []
    sizes = [-(-n // block) for n, _ in jobs]
    for (n, runs_past), size in zip(jobs, sizes, strict=True):
        chosen = np.zeros(cap + 1, dtype=bool)
        if 0 < size <= cap:
            cand = past[: cap + 1 - size] + (n if runs_past else 0)
            better = (cand < past[size:]) & (cand <= extra)
            chosen[size:] = better
            past = past.copy()
            past[size:] = np.where(better, cand, past[size:])
        taken.append(chosen)
    reached = np.flatnonzero(past < inf)
    count = int(reached[-1])
    out = []
    for j in range(len(jobs) - 1, -1, -1):
        if taken[j][count]:
            out.append(j)
            count -= sizes[j]
    return sorted(out)


def pooled_processors(pool: FreePool, problem: Problem) -> int | None:
    """Free processors (cores) of `pool`, or None on a system without a "core" resource."""
    if CORE not in problem.resources:
        return None
    r = problem.resources.index(CORE)
    return sum(vec[r] * len(nodes) for vec, nodes in pool.groups.items())


def most_processors_now(
    problem: Problem, free_now: FreePool, reservation: Reservation | None, jobs: list[Job]
) -> list[int]:
    """Positions in `jobs` of the set Reservation_DP starts now on `free_now` (with no
    reservation, every job counts as ending before τ)."""
    items = [
        (processors(problem, j), reservation is not None and reservation.runs_past(j))
        for j in jobs
    ]
    now = pooled_processors(free_now, problem)
    extra = pooled_processors(reservation.limit, problem) if reservation is not None else now
    if now is None or extra is None:  # no cores: only the placement bounds the set
        now = sum(n for n, _ in items)
        extra = now
    return pack(items, now, extra)


def processors_now(problem: Problem, jobs: list[Job], plan: Plan) -> int:
    """Σ n_i over the jobs of `jobs` that `plan` starts at t."""
    return sum(processors(problem, j) for j in jobs if plan.start_offsets[j.index] == 0)


def packed_around(problem: Problem, room: ProtectedRoom, jobs: list[Job]) -> list[int]:
    """Positions in `jobs` of a set that starts the most processors now around a protected
    room, greedily: most processors first (then `jobs`' order), each joining when the pooled
    capacity the room leaves holds it for all of its d_i."""
    profile = room.pooled_profile(problem)
    chosen = []
    for k in sorted(range(len(jobs)), key=lambda k: -processors(problem, jobs[k])):
        job = jobs[k]
        demand = job.demand()
        if profile.starts_now(demand, job.duration):
            profile.reserve(demand, 0, job.duration)
            chosen.append(k)
    return sorted(chosen)


def packed_first(problem: Problem, jobs: list[Job], room: ProtectedRoom | None) -> list[Job]:
    """`jobs` with the packing's set first, for a list schedule that starts it now and plans
    the rest behind it. Of the packed jobs, those running past τ come first, since only they
    are bound to the nodes the reservation leaves (each group in `jobs`' order); around the
    promises, the longest first (the least room is left during their runs)."""
    if room is not None and not isinstance(room, Reservation):
        chosen = set(packed_around(problem, room, jobs))
        packed = [j for k, j in enumerate(jobs) if k in chosen]
        return sorted(packed, key=room.fill_order) + [
            j for k, j in enumerate(jobs) if k not in chosen]
    reservation = room
    chosen = set(most_processors_now(problem, problem.free_now, reservation, jobs))
    packed = [j for k, j in enumerate(jobs) if k in chosen]
    order = sorted(packed, key=lambda j: not (reservation and reservation.runs_past(j)))
    return order + [j for k, j in enumerate(jobs) if k not in chosen]
