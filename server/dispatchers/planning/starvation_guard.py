"""Starvation guard of the CP dispatchers: the longest-waiting job gets EASY's head treatment.

Minimising total slowdown lets long and wide jobs wait: postponing a job by x seconds costs
x / d_i, little for a long job, and a job that cannot start now is not in the model at all. So
a long job can be passed over at every decision while short ones keep arriving (on whole
lublin_256 the papers' objective let one job wait 3.5× EASY's longest wait).

The guard bounds that with EASY's own rule, applied to one job: once the oldest queued job
(smallest q_i, then queue position) has waited at least `SearchSettings.starvation_wait_s`
seconds, it is *guarded*:

- if it fits on what is free now, it starts now: it comes first in every list schedule and the
  model gets now_i = 1 (no other job is protected in that decision);
- otherwise it holds the head reservation (EASY's: the earliest time its units fit node by node,
  and nothing started now may delay it), whether or not `protect_head` is set.

Jobs are guarded one at a time, oldest first, as EASY serves its heads; a job that has waited
less than the bound is planned by the objective alone. With a bound of 1 s every decision
guards its oldest job: EASY's head discipline, with the CP model choosing the backfill.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...domain.outcome_kinds import SkipReason
from .job_selection import Selection, never_fits
from .problem import Job, Problem


@dataclass(frozen=True, slots=True)
class Guarded:
    job: Job
    fits_now: bool  # starts now (forced); otherwise it holds the head reservation


def guarded_job(problem: Problem, selection: Selection, wait_bound_s: int) -> Guarded | None:
    """The oldest queued job, when it has waited at least `wait_bound_s` seconds (> 0) and can
    ever run on the up nodes; None otherwise or with the guard off (`wait_bound_s` = 0)."""
    if wait_bound_s <= 0 or not problem.jobs:
        return None
    never = {i for i, why in selection.skipped if why == SkipReason.NEVER_FITS}
    waiting = [j for j in problem.jobs if j.index not in never]
    if not waiting:
        return None
    oldest = min(waiting, key=lambda j: (j.submit, j.index))
    if problem.t - oldest.submit < wait_bound_s or never_fits(problem, oldest):
        return None
    blocked = {i for i, why in selection.skipped if why == SkipReason.CANNOT_FIT_NOW}
    return Guarded(oldest, oldest.index not in blocked)


def with_guarded_first(selection: Selection, guarded: Guarded) -> Selection:
    """The selection with a guarded job that fits now at the head of the considered jobs
    (taken from outside the window if it was there)."""
    job = guarded.job
    rest = [j for j in selection.considered if j.index != job.index]
    skipped = [(i, why) for i, why in selection.skipped if i != job.index]
    return Selection([job, *rest], skipped)
