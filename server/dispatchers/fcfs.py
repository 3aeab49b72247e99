"""First come, first served: start jobs in priority order (the workload manager's, then submit
order; submit order alone without priorities) until one does not fit, each only on nodes its
partitions and features allow and no unavailability window it would run into covers
(`Eligibility.now`). A job that fits what is free now but not where its rules allow it waits
without blocking the queue (skipped CANNOT_FIT_NOW)."""

from __future__ import annotations

from typing import ClassVar

from ..domain.outcome_kinds import SkipReason
from .base import HEURISTIC, Outcome, SearchControl
from .planning.job_orders import by_priority
from .planning.job_selection import never_fits
from .planning.problem import Problem
from .table_row import TableRow


class FcfsDispatcher:
    name: ClassVar[str] = "fcfs"
    # The tables of README.md and docs/configuration.md (scripts/gen_tables.py).
    table: ClassVar[TableRow] = TableRow(
        summary="priority order, then submit order; stops at the first job that does not fit")

    def decide(self, problem: Problem, control: SearchControl) -> Outcome:
        """Past the deadline, or once the caller is gone, the jobs placed so far are the
        decision (each placement is valid on its own) and the rest wait (BLOCKED)."""
        pool = problem.free_now.copy()
        outcome = Outcome(placements={}, status=HEURISTIC)
        blocked = False
        masks = problem.eligibility
        for job in by_priority(problem):
            if not blocked and control.should_stop():
                blocked = True
            if blocked:
                outcome.skipped.append((job.index, SkipReason.BLOCKED))
                continue
            if never_fits(problem, job):
                # A job no set of up nodes can ever hold must not block the queue forever.
                outcome.skipped.append((job.index, SkipReason.NEVER_FITS))
                continue
            mask = masks.now(job.index) if masks else None
            nodes = pool.place(job.req, job.units, control.first_fit, mask)
            if nodes is None:
                if mask is not None and pool.units_fit(job.req, job.units) >= job.units:
                    # It fits what is free, but not where its rules allow it now: it waits
                    # and blocks no other job (as EASY's queue, easy.py).
                    outcome.skipped.append((job.index, SkipReason.CANNOT_FIT_NOW))
                    continue
                blocked = True
                outcome.skipped.append((job.index, SkipReason.CANNOT_FIT_NOW))
                continue
            outcome.considered.append(job.index)
            outcome.placements[job.index] = nodes
        return outcome
