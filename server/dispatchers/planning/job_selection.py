"""Which queued jobs enter a model at t, in which priority order.

Priority is the current slowdown, highest first. The papers' reductions: the fit-now filter
(a job whose units cannot all be placed on what is free at t stays out) and the window of the
m highest-priority jobs that pass it. Where the workload manager's priorities differ (a site's
rules, `Job.priority`), the window takes the jobs of higher priority first, by slowdown within
each priority, and holds them in slowdown order (the objective's w_i weighs priority inside
the model); with equal priorities, the papers' window as it was.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...domain.outcome_kinds import SkipReason
from .eligibility import fits_ever
from .problem import Job, Problem, slowdown_rank
from .stopping import StopCheck, Stopped, every_few, never


def slowdown_priority(problem: Problem, jobs: list[Job]) -> list[Job]:
    """Highest current slowdown (t - q_i + d_i) / d_i first; ties: smaller d_i, smaller demand
    (`slowdown_rank`). The whole queue in this order is `Problem.jobs_by_slowdown`."""
    return sorted(jobs, key=lambda j: slowdown_rank(j, problem.t))


def submit_order(jobs: list[Job]) -> list[Job]:
    return sorted(jobs, key=lambda j: (j.submit, j.index))


def never_fits(problem: Problem, job: Job) -> bool:
    """True when the job exceeds what all up nodes could offer even with nothing running (up
    nodes its partitions and features allow, when it has any: `eligibility`)."""
    if problem.units_fit_empty(job.req) < job.units:
        return True
    allowed = problem.eligibility.allowed(job.index) if problem.eligibility else None
    return allowed is not None and not fits_ever(allowed, problem.capacity, problem.eligible,
                                                 job.req, job.units)


@dataclass(slots=True)
class Selection:
    considered: list[Job] = field(default_factory=list)  # priority order
    skipped: list[tuple[int, SkipReason]] = field(default_factory=list)  # (job index, why)


def select_for_model(
    problem: Problem, window: int, max_units: int | None = None, should_stop: StopCheck = never
) -> Selection:
    """Fit-now filter, then the window of the m highest-priority jobs that can start at t:
    the workload manager's priority first, where it differs, then the current slowdown.

    With `max_units`, the window also holds at most that many units in all: a job that would
    pass it stays out this time (OUTSIDE_WINDOW) and smaller ones after it may still enter.
    Raises Stopped when `should_stop()` turns true (checked every few jobs).
    """
    selection = Selection()
    considered, skipped = selection.considered, selection.skipped
    units_fit = problem.free_now.units_fit
    units = 0
    check = every_few(should_stop)
    by_slowdown = problem.jobs_by_slowdown()
    ranked = _by_priority_then_slowdown(by_slowdown)
    for job in ranked:
        if check():
            raise Stopped("job selection")
        if units_fit(job.req, job.units) < job.units:
            reason = (
                SkipReason.NEVER_FITS if never_fits(problem, job)
                else SkipReason.CANNOT_FIT_NOW
            )
            skipped.append((job.index, reason))
        elif len(considered) >= window or (
            max_units is not None and units + job.units > max_units and considered
        ):
            skipped.append((job.index, SkipReason.OUTSIDE_WINDOW))
        else:
            considered.append(job)
            units += job.units
    if ranked is not by_slowdown:  # back to slowdown order, the models' job order
        position = {j.index: k for k, j in enumerate(by_slowdown)}
        considered.sort(key=lambda j: position[j.index])
    return selection


def _by_priority_then_slowdown(by_slowdown: list[Job]) -> list[Job]:
    """`by_slowdown` (slowdown order) with higher workload-manager priority first, slowdown
    order within equal priority; `by_slowdown` itself when every priority is equal."""
    if not by_slowdown or all(j.priority == by_slowdown[0].priority for j in by_slowdown):
        return by_slowdown
    return sorted(by_slowdown, key=lambda j: -j.priority)  # stable: slowdown within a priority
