"""SJF backfill: EASY's head reservation, the jobs behind the head backfilled shortest first.

The oldest jobs start in submit order while they fit. The first that does not fit (the head)
gets EASY's reservation: the earliest time its units fit once the running jobs end as
predicted. The jobs behind it are then tried shortest expected duration first, and each starts
now where it does not delay the head. (The built-in `easy-sjbf` is the same policy; this one is
written against the public interface only, `hpcdispatch.server.dispatchers.api`.)
"""

from __future__ import annotations

from hpcdispatch.server.dispatchers.api import (
    Job,
    Outcome,
    Problem,
    SearchControl,
    SkipReason,
    SolveStatus,
    place_around,
    reserve_head,
)


class SjfBackfill:
    """Registered as `sjf-backfill` (pyproject.toml, group `hpcdispatch.dispatchers`)."""

    def decide(self, problem: Problem, control: SearchControl) -> Outcome:
        outcome = Outcome(placements={}, status=SolveStatus.HEURISTIC)  # decided by a rule
        free = problem.free_now.copy()  # what is free now, less what this decision starts
        # The queue in submit order, without the jobs larger than the whole machine (the
        # decision's report says why they wait).
        queue: list[Job] = []
        for job in sorted(problem.jobs, key=lambda j: (j.submit, j.index)):
            if problem.units_fit_empty(job.req) >= job.units:
                queue.append(job)
            else:
                outcome.skipped.append((job.index, SkipReason.NEVER_FITS))
        # The oldest jobs, while they fit.
        position = 0
        while position < len(queue):
            job = queue[position]
            nodes = free.place(job.req, job.units, control.first_fit)
            if nodes is None:
                break
            outcome.placements[job.index] = nodes
            position += 1
        if position == len(queue):
            return outcome
        # The head's reservation, around what starts now.
        started = [(problem.jobs[i], nodes) for i, nodes in outcome.placements.items()]
        reservation = reserve_head(problem, free, queue[position], started)
        # The jobs behind the head, shortest expected duration first.
        behind = sorted(queue[position + 1:], key=lambda j: (j.duration, j.submit, j.index))
        for job in behind:
            if control.should_stop():  # the decision's deadline: what is placed stands
                break
            nodes = place_around(free, reservation, job, control.first_fit)
            if nodes is not None:
                outcome.placements[job.index] = nodes
        return outcome
