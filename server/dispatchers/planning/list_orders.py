"""The heuristic plan over more list orders: the best of the strong backfilling orders.

`greedy_schedule.best_list_schedule` tries the priority order (highest current slowdown first)
and submit order. With `SearchSettings.more_orders` the heuristic plan also tries the list
schedules in the queue orders of the best backfilling heuristics (`job_orders`): SJF (shortest
d_i first), F1 (smallest log10(d_i) × n_i + 870 × log10(q_i) first) and WFP3 (largest
(w_i / d_i)³ × n_i first), and keeps the lowest total slowdown. The search is hinted with that
plan and the decision is never worse, by the objective, than any of these list schedules.

A job pinned first (the starvation guard's) stays first in every order.
"""

from __future__ import annotations

from . import job_orders
from .greedy_schedule import greedy_schedule, total_slowdown
from .plan import Plan
from .problem import Job, Problem
from .protected_room import ProtectedRoom
from .stopping import StopCheck, never

SCORES = (job_orders.sjf_score, job_orders.f1_score, job_orders.wfp3_score)


def extra_orders(problem: Problem, jobs: list[Job], pinned: Job | None = None) -> list[list[Job]]:
    """`jobs` in SJF, F1 and WFP3 order (`pinned` first in each), duplicates left out."""
    rest = [j for j in jobs if pinned is None or j.index != pinned.index]
    head = [pinned] if pinned is not None else []
    orders: list[list[Job]] = []
    seen = {tuple(j.index for j in jobs)}
    for score in SCORES:
        order = head + job_orders.sort_by(rest, score(problem))
        key = tuple(j.index for j in order)
        if key not in seen:
            seen.add(key)
            orders.append(order)
    return orders


def best_of_orders(
    problem: Problem,
    jobs: list[Job],
    incumbent: tuple[Plan, float],
    exact_allocation_now: bool,
    first_fit: bool,
    room: ProtectedRoom | None,
    pinned: Job | None = None,
    should_stop: StopCheck = never,
) -> tuple[Plan, float]:
    """The best, by total slowdown of `jobs`, of `incumbent` and the extra orders' schedules.

    Raises Stopped when `should_stop()` turns true (checked once per job).
    """
    best = incumbent
    for order in extra_orders(problem, jobs, pinned):
        plan = greedy_schedule(
            problem, order, exact_allocation_now, first_fit, room, should_stop
        )
        objective = total_slowdown(problem, jobs, plan.start_offsets)
        if objective < best[1] - 1e-9:
            best = plan, objective
    return best
