"""LOS, lookahead optimising scheduler (Shmueli & Feitelson 2005): pack the most processors now.

Jobs start in submit order while they fit, and the first one that does not fit (the head) gets
EASY's reservation at τ: EASY's own steps (`LosDispatcher` is an `EasyDispatcher` that chooses
differently only around the head). Of the next L queued jobs (the
lookahead, `SearchSettings.lookahead_depth`, `search.lookahead_depth` in a request; 50 by
default, the paper's), LOS starts now the set that maximises the processors used now,
Σ n_i, subject to (their Reservation_DP):

- Σ n_i <= the processors free now, and
- Σ n_i over the jobs still running at τ (d_i > τ) <= the processors the head's reservation
  leaves free at τ ("extra"), so the head's start is never delayed.

A dynamic programme over processors (for each count used now, the fewest used past τ) finds the
set exactly in the pooled view; its jobs are then placed node by node around the reservation in
submit order (one that cannot be placed waits, BLOCKED), and the other lookahead jobs are tried
after them in submit order, as EASY would, on what is left. Jobs past the lookahead wait
(OUTSIDE_WINDOW). n_i is rn_i x cores per unit (`job_orders.processors`); on a system whose
resources include no "core", n_i is rn_i and only the node-by-node placement bounds the set.
Differences from the paper: a head that fits starts (the paper's Basic_DP may pass it over
when others pack better), and on systems of more than MAX_DP_PROCESSORS free processors the
programme counts processors in blocks (n_i rounded up, capacities down), which keeps it exact
about never delaying the head but may pack a little less.

Past the deadline, or once the caller is gone, the jobs placed so far are the decision and the
rest wait (BLOCKED).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from hpcdispatch.v1 import dispatcher_pb2 as pb

from .base import Outcome, SearchControl
from .easy import EasyDispatcher, backfill_around, reserve_for_head
from .planning.free_pool import FreePool
from .planning.job_orders import CORE, processors
from .planning.problem import Job, Problem
from .planning.reservation import Reservation
from .planning.stopping import Stopped

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


def _pooled_processors(pool: FreePool, problem: Problem) -> int | None:
    """Free processors (cores) of `pool`, or None on a system without a "core" resource."""
    if CORE not in problem.resources:
        return None
    r = problem.resources.index(CORE)
    return sum(vec[r] * len(nodes) for vec, nodes in pool.groups.items())


class LosDispatcher(EasyDispatcher):
    name: ClassVar[str] = "los"
    kind: ClassVar[int] = pb.DISPATCHER_LOS

    def around_the_head(
        self, problem: Problem, control: SearchControl, outcome: Outcome, free_now: FreePool,
        head: Job, rest: list[Job],
    ) -> Outcome:
        """Of the `lookahead_depth` jobs after the head, the packing's set is tried first, then
        the others in queue order, each around the head's reservation; later jobs wait."""
        try:
            reservation = reserve_for_head(problem, outcome, free_now, head, control)
        except Stopped:
            return self._stopped(outcome, [head, *rest])
        outcome.considered.append(head.index)
        depth = max(1, control.settings.lookahead_depth)
        window = rest[:depth]
        outcome.skipped.extend((j.index, pb.SKIP_REASON_OUTSIDE_WINDOW) for j in rest[depth:])
        chosen = self._packing(problem, free_now, reservation, window)
        picked = set(chosen)
        tried = [window[k] for k in chosen] + [
            j for k, j in enumerate(window) if k not in picked]
        return backfill_around(outcome, free_now, reservation, tried, control.first_fit,
                               control.should_stop)

    @staticmethod
    def _packing(
        problem: Problem, free_now: FreePool, reservation: Reservation, window: list[Job]
    ) -> list[int]:
        """Positions in `window` of the set Reservation_DP starts now."""
        now = _pooled_processors(free_now, problem)
        extra = _pooled_processors(reservation.limit, problem)
        items = [(processors(problem, j), reservation.runs_past(j)) for j in window]
        if now is None or extra is None:  # no cores: only the placement bounds the set
            now = sum(n for n, _ in items)
            extra = now
        return pack(items, now, extra)

