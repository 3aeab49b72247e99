"""What a dispatcher plugin may import: the interface every dispatcher implements, and the
building blocks EASY is made of. Everything else in `hpcdispatch.server` may move between
releases; these names stay (docs/plugins.md).

A dispatcher is any object with `decide(problem, control) -> Outcome`, registered in the entry
point group `hpcdispatch.dispatchers` as a class (or callable) that makes it without arguments.

- `Problem`: the snapshot at t, indexed: `jobs` (the queue, each a `Job` with its `index`, `id`,
  `submit` q_i, `units` rn_i, per-unit request `req` over `resources`, predicted `duration`
  d_i), `node_ids`, `free_now` (a `FreePool` of what is free at t on the nodes that are up),
  `units_fit_empty(req)` (units of `req` the up nodes hold when empty: a job needing more never
  fits);
- `SearchControl`: the decision's deadline (`remaining()`, `should_stop()`) and the allocator
  asked for (`first_fit`);
- `Outcome`: what starts now, `placements` {job index: [node index of each unit]}, a
  `status`, a `SolveStatus` (`SolveStatus.HEURISTIC`, also named `HEURISTIC`, for a rule, as
  EASY's), and optionally `skipped`, (job index, `SkipReason`) of the jobs left waiting: the
  server's own types, which it converts to the answer's report (a plugin never sees the wire);
- `FreePool.place(req, units, first_fit)` takes units from the pool (None when they do not fit);
  `reserve_head(problem, free_now, head, started)` gives the head job EASY's reservation at the
  earliest time it fits given what starts now; `place_around(free_now, reservation, job,
  first_fit)` places a job now without delaying that reservation (None when it cannot).

The decision is checked against the snapshot by the server, independently of the plugin, and
replaced by EASY's when it does not pass: a plugin cannot start what does not fit.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..domain.free_pool import FreePool
from ..domain.outcome_kinds import SkipReason, SolveStatus
from .base import HEURISTIC, Outcome, SearchControl
from .planning.problem import Job, Problem
from .planning.reservation import Reservation, place_around_reservation, reserve

__all__ = [
    "HEURISTIC", "FreePool", "Job", "Outcome", "Problem", "Reservation", "SearchControl",
    "SkipReason", "SolveStatus", "place_around", "reserve_head",
]


def reserve_head(problem: Problem, free_now: FreePool, head: Job,
                 started: Iterable[tuple[Job, list[int]]] = ()) -> Reservation:
    """EASY's reservation for `head`: the earliest time its units fit, node by node, once the
    running jobs and the jobs `started` now (each with its units' nodes, already taken from
    `free_now`) end as predicted. `head` must fit the empty machine
    (`problem.units_fit_empty(head.req) >= head.units`)."""
    return reserve(problem, free_now, head, started)


def place_around(free_now: FreePool, reservation: Reservation, job: Job,
                 first_fit: bool = False) -> list[int] | None:
    """Start `job` now (its units taken from `free_now`) where it does not delay
    `reservation`: it ends before the reserved start, or uses what the head leaves free
    then; the node of each unit, or None when it cannot start now."""
    return place_around_reservation(free_now, reservation, job, first_fit)
