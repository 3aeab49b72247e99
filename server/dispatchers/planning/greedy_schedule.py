"""List schedules: the heuristic plan of the CP dispatchers.

Each job, in list order (priority, or submit order), gets the earliest start at which the pooled
capacity holds it for d_i, and a job that does not start at t starts no earlier than the first
end (`later_start_bounds`). With `exact_allocation_now`, a start at t also needs a node-level
placement at t (best fit), so the jobs it starts now form a valid decision by themselves.
With a protected room (EASY's head reservation, or every promise held: `protected_room`), the
pooled capacity holds it, and a start at t is placed around it.
"""

from __future__ import annotations

from .job_selection import submit_order
from .plan import Plan
from .problem import Job, Problem, later_start_bounds
from .protected_room import ProtectedRoom, place_now, pooled_profile
from .stopping import StopCheck, every_few, never, stop_if


def greedy_schedule(
    problem: Problem,
    jobs: list[Job],
    exact_allocation_now: bool,
    first_fit: bool = False,
    room: ProtectedRoom | None = None,
    should_stop: StopCheck = never,
) -> Plan:
    """With a protected `room`, it is held in the pooled plan and starts at t respect it.

    Raises Stopped when `should_stop()` turns true (checked every few jobs).
    """
    profile = pooled_profile(problem, room)
    pool = problem.free_now.copy()
    if room is not None:
        room = room.copy()
    plan = Plan({})
    later = later_start_bounds(problem, jobs)
    check = every_few(should_stop)
    for job in jobs:
        stop_if(check, "list schedule")
        demand = job.demand()
        start = profile.earliest_start(demand, job.duration)
        if start == 0 and exact_allocation_now:
            nodes = place_now(pool, room, job, first_fit)
            if nodes is None:
                start = profile.earliest_start(demand, job.duration, not_before=later[job.index])
            else:
                plan.unit_nodes[job.index] = nodes
        profile.reserve(demand, start, job.duration)
        plan.start_offsets[job.index] = start
    plan.after_starts = pool, room
    return plan


def best_list_schedule(
    problem: Problem,
    jobs: list[Job],
    exact_allocation_now: bool,
    first_fit: bool = False,
    room: ProtectedRoom | None = None,
    should_stop: StopCheck = never,
) -> tuple[Plan, float]:
    """The better, by total slowdown, of the list schedules in priority and in submit order.

    Priority order starts the short jobs first and plans the wide ones behind them; submit
    order (conservative backfilling) starts the old wide jobs now and fits the others around.
    On an idle machine with one very wide job queued, the two plans differ by a few percent of
    total slowdown and by most of the machine in what starts now; a short search started
    from the worse one does not always reach the better.
    """
    best: tuple[Plan, float] | None = None
    for order in (jobs, submit_order(jobs)):
        plan = greedy_schedule(
            problem, order, exact_allocation_now, first_fit, room, should_stop
        )
        objective = total_slowdown(problem, jobs, plan.start_offsets)
        if best is None or objective < best[1] - 1e-9:
            best = plan, objective
        if not any(plan.start_offsets.values()):
            break  # every job starts at t: the least total slowdown, no other order beats it
    assert best is not None
    return best


def total_slowdown(problem: Problem, jobs: list[Job], start_offsets: dict[int, int]) -> float:
    """Σ (s_i - q_i + d_i) / d_i with s_i = t + start offset."""
    return sum(
        (problem.t + start_offsets[j.index] - j.submit + j.duration) / j.duration for j in jobs
    )
