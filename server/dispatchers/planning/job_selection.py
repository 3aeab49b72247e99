"""Which queued jobs enter a model at t, in which priority order.

Priority is the current slowdown, highest first. The papers' reductions: the fit-now filter
(a job whose units cannot all be placed on what is free at t stays out) and the window of the
m highest-priority jobs that pass it.
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
    """Fit-now filter, then the window of the m highest-priority jobs that can start at t.

    With `max_units`, the window also holds at most that many units in all: a job that would
    pass it stays out this time (OUTSIDE_WINDOW) and smaller ones after it may still enter.
    Raises Stopped when `should_stop()` turns true (checked every few jobs).
    """
    selection = Selection()
    considered, skipped = selection.considered, selection.skipped
    units_fit = problem.free_now.units_fit
    units = 0
    check = every_few(should_stop)
    for job in problem.jobs_by_slowdown():
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
    return selection
