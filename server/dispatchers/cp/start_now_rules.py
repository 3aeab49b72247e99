"""A site's rules on the starts at t of a CP decision: which starts break them, and a placement
that keeps them.

Job i may start at t only on its start-now nodes (`Eligibility.now`): E_i, the nodes its
partitions and features allow, less those of the unavailability windows it would run into
(overlapping [t, t + requested_i), not admitting it). The models keep to them (PCP'20's
positions, PCP'19's counts, HCP'19's allocation); the list schedules and the passes after the
model place on any node, so their starts are checked here and placed again within the rules.
"""

from __future__ import annotations

import numpy as np

from ...domain.free_pool import FreePool, NodeMask
from ..planning.problem import Job, Problem
from ..planning.protected_room import ProtectedRoom


def breaking_the_rules(problem: Problem, placements: dict[int, list[int]]) -> set[int]:
    """The jobs of `placements` started now on a node outside their start-now mask."""
    rules = problem.eligibility
    if rules is None:
        return set()
    broken = set()
    for i, nodes in placements.items():
        mask = rules.now(i)
        if mask is not None and not all(n in mask for n in nodes):
            broken.add(i)
    return broken


def place_within(problem: Problem, pool: FreePool, room: ProtectedRoom | None, job: Job,
                 mask: NodeMask, first_fit: bool) -> list[int] | None:
    """Place `job` at t on the nodes of `mask` only, taking from `pool`, around `room`: on
    what is free now and the room leaves it for its whole d_i (`ProtectedRoom.pool_for`),
    node by node the lesser of the two (a per-node cost, for restricted jobs starting now);
    the start is recorded in `room`. None: it does not fit so (nothing taken)."""
    if room is None:
        return pool.place(job.req, job.units, first_fit, mask)
    limit = room.pool_for(job, pool)
    if limit is None:
        nodes = pool.choose(job.req, job.units, first_fit, mask)
    else:
        n_res = len(problem.resources)
        free = np.minimum(np.asarray(pool.free, dtype=np.int64).reshape(-1, n_res),
                          np.asarray(limit.free, dtype=np.int64).reshape(-1, n_res))
        nodes = FreePool.from_array(free, pool.eligible, pool.scale).choose(
            job.req, job.units, first_fit, mask)
    if nodes is not None:
        pool.take_all(nodes, job.req)
        room.take(pool, nodes, job)
    return nodes


def place_again_within_rules(problem: Problem, placements: dict[int, list[int]],
                             broken: set[int], room: ProtectedRoom | None, first_fit: bool
                             ) -> dict[int, list[int]]:
    """`placements` with each job of `broken` placed again on its start-now nodes, in the
    order of `placements`, around the others' starts and `room` (a copy is used), or left
    out where it does not fit so."""
    rules = problem.eligibility
    assert rules is not None
    by_index = problem.job_by_index()
    pool = problem.free_now.copy()
    held = room.copy() if room is not None else None
    kept = {i: nodes for i, nodes in placements.items() if i not in broken}
    for i, nodes in kept.items():  # the starts that keep the rules stay where they are
        pool.take_all(nodes, by_index[i].req)
        if held is not None:
            held.take(pool, nodes, by_index[i])
    out: dict[int, list[int]] = {}
    for i, nodes in placements.items():
        if i not in broken:
            out[i] = nodes
            continue
        mask = rules.now(i)
        assert mask is not None
        placed = place_within(problem, pool, held, by_index[i], mask, first_fit)
        if placed is not None:
            out[i] = placed
    return out
