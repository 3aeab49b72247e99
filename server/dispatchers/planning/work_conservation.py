"""Work conservation beyond the window: queued jobs the model did not see start when they fit.

Only the m highest-priority jobs that fit now enter a model (the window); when the queue is
longer, the others are not considered at all, and nodes can stay idle while one of them would
fit (whole lublin_256 queues thousands of jobs). The work-conserving pass of the plan
(`left_shift`) only moves the window's own jobs.

With `SearchSettings.work_conserving`, after the decision, every queued job outside the model,
in priority order (highest current slowdown first), starts now when

- the pooled plan (running work, the head's reserved block, every job of the model at its
  planned start, and the jobs this pass started) has room for it over [t, t + d_i): it delays
  no planned start in the pooled view, as `left_shift` requires of the window's jobs; and
- its units can be placed on what is still free without touching the head's reservation
  (EASY's rule: a job running past the reserved start τ may only use what the reservation
  leaves free at τ).

Each job it starts is one more valid placement: the decision is the plan's, plus these.
"""

from __future__ import annotations

from ...domain.free_pool import FreePool
from .left_shift import planned_profile
from .plan import Plan
from .problem import Job, Problem
from .protected_room import ProtectedRoom, place_now
from .stopping import StopCheck, Stopped, every_few, never


def start_what_fits(
    problem: Problem,
    jobs: list[Job],
    plan: Plan,
    placements: dict[int, list[int]],
    room: ProtectedRoom | None,
    first_fit: bool,
    should_stop: StopCheck = never,
) -> dict[int, list[int]]:
    """`placements` (the decision for the model's `jobs`, planned as `plan`) plus the queued
    jobs outside the model that fit now around the plan and the reservation.

    Raises Stopped when `should_stop()` turns true (checked every few jobs tried).
    """
    pool, held = _after_starts(problem, plan, placements, room)
    profile = planned_profile(problem, jobs, plan, room)
    in_model = {j.index for j in jobs} | set(placements)
    if room is not None:
        in_model |= room.held_jobs()
    result = dict(placements)
    check = every_few(should_stop)
    for job in problem.jobs_by_slowdown():
        if not pool.groups:
            break  # nothing free any more
        if job.index in in_model or pool.units_fit(job.req, job.units) < job.units:
            continue
        if check():
            raise Stopped("work conservation")
        demand = job.demand()
        if not profile.starts_now(demand, job.duration):
            continue  # would delay a planned start (or the reserved block)
        nodes = place_now(pool, held, job, first_fit)
        if nodes is not None:
            profile.reserve(demand, 0, job.duration)
            result[job.index] = nodes
    return result


def _after_starts(
    problem: Problem, plan: Plan, placements: dict[int, list[int]],
    room: ProtectedRoom | None,
) -> tuple[FreePool, ProtectedRoom | None]:
    """What is still free at t once `placements` start, and the reservation as they leave it:
    the list schedule's own when `plan` is one that placed exactly these (taken from the
    plan), else placed here."""
    kept = plan.after_starts
    if kept is not None and placements == plan.placements():
        plan.after_starts = None
        return kept
    by_index = problem.job_by_index()
    pool = problem.free_now.copy()
    held = room.copy() if room is not None else None
    for i, taken in placements.items():
        job = by_index[i]
        pool.take_all(taken, job.req)
        if held is not None:
            held.take(pool, taken, job)
    return pool, held
