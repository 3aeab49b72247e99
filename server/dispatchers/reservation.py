"""EASY's protection: a reservation for one blocked job, and what others may use meanwhile.

The head (a job that cannot start at t) gets the earliest time τ at which enough units fit node
by node, given the predicted ends of the running work and of the jobs already started at t, on
the nodes that leave the most of what is free now to the others (`head_nodes`).
A job that starts now and runs past τ may only use `limit`: on each node, what is free now and
also left free at τ by the head's units. Used by EASY, and by the CP dispatchers' `protect_head`.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass

from hpcdispatch.server.dispatchers.free_pool import FreePool, Vec, units_per_node
from hpcdispatch.server.dispatchers.problem import Job, Problem
from hpcdispatch.server.dispatchers.stopping import StopCheck, never, stop_if


@dataclass(slots=True)
class Reservation:
    job: Job
    start: int  # τ, relative to t
    at_start: FreePool  # free at τ with the head's units taken
    limit: FreePool  # per node: min(free now, at_start)
    # Start of the head's block in the pooled view after t: τ, or later where that view
    # releases running work later than the node-level τ saw it (see Problem.pooled_releases).
    pooled_start: int

    def copy(self) -> Reservation:
        return Reservation(
            self.job, self.start, self.at_start.copy(), self.limit.copy(), self.pooled_start
        )

    def block(self) -> tuple[int, int, Vec]:
        """The head's block in the pooled view after t: (start, duration, demand)."""
        return self.pooled_start, self.job.duration, self.job.demand()

    def runs_past(self, job: Job) -> bool:
        """Whether `job`, started now, is still running at τ (and so must stay in `limit`)."""
        return job.duration > self.start

    def take(self, free_now: FreePool, nodes: list[int], job: Job) -> None:
        """Record that `job` starts now on `nodes`, already taken from `free_now`."""
        if self.runs_past(job):
            self.at_start.take_all(nodes, job.req)
        for n in set(nodes):
            self.limit.set(n, tuple(map(min, free_now.free[n], self.at_start.free[n])))


def place_around_reservation(
    free_now: FreePool, reservation: Reservation | None, job: Job, first_fit: bool = False
) -> list[int] | None:
    """Place `job` at t (taking from `free_now`) without touching the head's reservation."""
    pool = (
        reservation.limit if reservation is not None and reservation.runs_past(job) else free_now
    )
    nodes = pool.choose(job.req, job.units, first_fit)
    if nodes is None:
        return None
    free_now.take_all(nodes, job.req)
    if reservation is not None:
        reservation.take(free_now, nodes, job)
    return nodes


def head_nodes(at_start: FreePool, free_now: FreePool, head: Job) -> list[int]:
    """Nodes for the head's units at τ (one entry per unit), keeping `limit` as large as it can.

    What a node has free now and the head takes at τ is lost to every job that would start now
    and run past τ. So nodes with nothing free now come first, then the others by how little
    they have free now; within each, best fit at τ (the pool's own rule), then node order.
    """
    with_free: set[int] = set().union(*free_now.groups.values())
    fitting = sorted(
        ((at_start.score(vec), units_per_node(vec, head.req), nodes)
         for vec, nodes in at_start.groups.items() if units_per_node(vec, head.req) > 0),
        key=lambda group: group[0],
    )
    chosen: list[int] = []
    for _, k, nodes in fitting:  # nodes with nothing free now
        need = head.units - len(chosen)
        for n in heapq.nsmallest(-(-need // k), nodes - with_free):
            chosen.extend([n] * min(k, head.units - len(chosen)))
        if len(chosen) == head.units:
            return chosen
    partial = sorted(
        (free_now.score(free_now.free[n]), score, n, k)
        for score, k, nodes in fitting for n in nodes & with_free
    )
    for _, _, n, k in partial:
        chosen.extend([n] * min(k, head.units - len(chosen)))
        if len(chosen) == head.units:
            return chosen
    raise AssertionError("head_nodes called where the head does not fit")


def reserve(
    problem: Problem,
    free_now: FreePool,
    head: Job,
    started: Iterable[tuple[Job, list[int]]] = (),
    should_stop: StopCheck = never,
) -> Reservation:
    """Reserve for `head` given `free_now` (free at t after the jobs in `started` took theirs).

    Raises Stopped when `should_stop()` turns true (checked once per release time).
    """
    releases: dict[int, list[tuple[int, Vec]]] = {}
    for end, blocks in problem.releases_by_time():
        releases.setdefault(end, []).extend((b.node, b.amounts) for b in blocks)
    for job, nodes in started:
        for n in nodes:
            releases.setdefault(job.duration, []).append((n, job.req))
    pool = free_now.copy()
    # Pooled free amounts: a cheap necessary condition checked before the node-level one.
    pooled = [
        sum(vec[r] for vec, up in zip(pool.free, pool.eligible, strict=True) if up)
        for r in range(len(problem.resources))
    ]
    demand = head.demand()
    for end in sorted(releases):
        stop_if(should_stop, "head reservation")
        for n, amounts in releases[end]:
            pool.give(n, amounts)
            for r, a in enumerate(amounts):
                pooled[r] += a
        if any(p < d for p, d in zip(pooled, demand, strict=True)):
            continue
        if pool.units_fit(head.req, head.units) >= head.units:
            placed = head_nodes(pool, free_now, head)
            pool.take_all(placed, head.req)
            limit = FreePool(
                [tuple(map(min, a, b)) for a, b in zip(free_now.free, pool.free, strict=True)],
                problem.eligible,
                free_now.scale,
            )
            pooled_start = problem.pooled_profile().earliest_start(demand, head.duration, end)
            return Reservation(head, end, pool, limit, pooled_start)
    raise AssertionError("a job that fits an empty system must fit once all work ends")
