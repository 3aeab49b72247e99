"""EASY around the promises: the book's answer when its decision gives up (issue #49).

A book decision (`promise_after_s` >= 0) that is cut by the deadline, raises, fails the
independent check or starts nothing where a job fits never answers "start nothing", nor plain
EASY, which may start a job into a held promise's room or leave the oldest job unserved. Its
answer is at least EASY's decision of the snapshot around the promises held:

1. the promises are placed as the book's first step places them (`keep_the_promises`); the due
   ones start, and the oldest job that does not start holds (or gets) the head's promise;
2. then, in submit order, each waiting job without a promise that fits now until its requested
   time without taking any promise's room starts (`backfill_around_the_promises`);
3. the promises are reported and recorded with what was answered (`record_the_promises`), so
   the book holds what the caller was told.

A decision cut after step 1 answers so itself (`after_the_cut`); the pipeline asks a dispatcher
for it when it replaces a failed decision (`CpDispatcher.around_the_promises`). Where not even
the held promises could be placed, `PromisesUnplaced` says so and the pipeline answers plain
EASY, saying why. Either way the outcome's status is FALLBACK.
"""

from __future__ import annotations

import time

from ...domain.outcome_kinds import SkipReason, SolveStatus
from ..base import Outcome, PromisesUnplaced
from .decision import Abandoned, Decision, Next
from .promise_steps import backfill_around_the_promises, keep_the_promises, record_the_promises

# What EASY around the promises gets past a deadline that cut the decision: the time the
# pipeline's own fallback gets at least (pipeline.FALLBACK_MIN_SECONDS).
AFTER_THE_CUT_SECONDS = 0.5


def after_the_cut(d: Decision) -> Outcome:
    """A decision whose promises were placed (step 1) and then cut: the due promises and EASY's
    backfill around every promise start, the promises recorded with them (status FALLBACK)."""
    state = d.promised
    assert state is not None and state.plan is not None, "the promises are placed first"
    d.stop_build_clock()
    outcome = d.outcome
    outcome.placements, outcome.considered = {}, []
    outcome.skipped = [(i, SkipReason.NEVER_FITS) for i in sorted(state.never)]
    d.plan, d.jobs, d.placements = None, [], None  # no plan of the model's stands
    d.after_starts = None  # nor its starts
    until = time.monotonic() + AFTER_THE_CUT_SECONDS
    control = d.control
    started = backfill_around_the_promises(
        d, lambda: control.cancelled() or time.monotonic() > until)
    outcome.considered = list(started)
    waiting = [j.index for j in d.problem.jobs
               if j.index not in outcome.placements and j.index not in state.never]
    outcome.skipped.extend((i, SkipReason.BLOCKED) for i in waiting)
    outcome.status = SolveStatus.FALLBACK
    record_the_promises(d)
    return d.with_started_first()


def around_the_promises(d: Decision) -> Outcome:
    """EASY around the promises on a fresh decision `d` (the pipeline's fallback): the book's
    first step, then `after_the_cut`. Raises PromisesUnplaced where the held promises could
    not be placed in time."""
    try:
        done = keep_the_promises(d) is Next.DONE
    except Abandoned:
        raise PromisesUnplaced("the held promises could not be placed by the deadline") from None
    if done:  # no promise to keep: every job starts now, as EASY's would
        d.outcome.status = SolveStatus.FALLBACK
        return d.outcome
    return after_the_cut(d)
