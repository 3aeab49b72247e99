"""Start now what a plan postponed for nothing (a work-conserving pass over the decision).

Starting a job at t + 1 instead of t changes the total slowdown by only 1/d_i, so a solver
stopped at a feasible, not optimal, solution may put a job at t + 1 that could start at t; at
t + 1 the same can happen again, and a machine can sit idle. Before a plan becomes a decision,
every job it starts later, in priority order, moves to t when the pooled plan has room for it
over [t, t + d_i) and, for models that place units at t, a node-level placement exists that
leaves the protected head's reservation alone. Each move lowers the objective and keeps the plan
feasible in the pooled view.
"""

from __future__ import annotations

from .capacity_profile import CapacityProfile
from .plan import Plan
from .problem import Job, Problem
from .protected_room import ProtectedRoom, place_now, pooled_profile


def planned_profile(
    problem: Problem, jobs: list[Job], plan: Plan, room: ProtectedRoom | None
) -> CapacityProfile:
    """The pooled capacity over time once the running work, the protected room (the head's
    reserved block, or the promises) and every job of `jobs` at its planned start t + s_i hold
    their resources."""
    profile = pooled_profile(problem, room)
    for job in jobs:
        profile.reserve(job.demand(), plan.start_offsets[job.index], job.duration)
    return profile


def left_shift(
    problem: Problem,
    jobs: list[Job],
    plan: Plan,
    room: ProtectedRoom | None,
    exact_allocation_now: bool,
    first_fit: bool,
) -> Plan:
    profile = planned_profile(problem, jobs, plan, room)
    offsets, unit_nodes = dict(plan.start_offsets), dict(plan.unit_nodes)
    pool = problem.free_now.copy()
    held = room.copy() if room is not None else None
    if exact_allocation_now:
        for job in jobs:
            if offsets[job.index] == 0 and job.index in unit_nodes:
                pool.take_all(unit_nodes[job.index], job.req)
                if held is not None:
                    held.take(pool, unit_nodes[job.index], job)
    for job in jobs:  # priority order
        planned = offsets[job.index]
        if planned == 0:
            continue
        demand = job.demand()
        released = tuple(-d for d in demand)
        profile.reserve(released, planned, job.duration)
        if profile.starts_now(demand, job.duration):
            placed = (
                place_now(pool, held, job, first_fit)
                if exact_allocation_now else []
            )
            if placed is not None:
                profile.reserve(demand, 0, job.duration)
                offsets[job.index] = 0
                if exact_allocation_now:
                    unit_nodes[job.index] = placed
                continue
        profile.reserve(demand, planned, job.duration)
    return Plan(offsets, unit_nodes, plan.unit_counts)
