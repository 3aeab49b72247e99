"""A CP decision under the promise book: promise, then pack, then slowdown.

With `SearchSettings.promise_after_s` >= 0 a waiting job holds a promised start s_i once it has
waited that long (0: from its arrival, as conservative backfilling promises every job), and
the oldest job that does not start now always holds one (EASY's head). A promise is kept from
one decision to the next (`PromiseBook`, per caller scope and node list:
`planning.caller_scope`; or sent back by the caller, `Job.promised`) and only ever moves
earlier while the expected durations hold. At each decision at t:

1. the promises held are placed, compressed, and given to the jobs that qualify now
   (`planning.promises.keep_promises`); a promise that can no longer be kept (a running job
   outlived its expected end) moves by the least possible, and the outcome says by how much;
2. every job whose promise is due starts now;
3. the jobs without a promise that fit now around every promise are the candidates; the model
   (`now_set`) chooses which start now: the most processors first, then the papers' priority;
   the chosen ones are placed node by node, and every other candidate that still fits starts
   too (work conservation: nothing a promise does not need stays idle);
4. each waiting job's expected start is reported: its promise, or for the window's other jobs
   the start a list schedule in priority order would give them (what `squeue --start` shows).

Nothing started now can move a promise later: it fits around all of them for its whole d_i.
A decision where nothing can start builds no model.
"""

from __future__ import annotations

import time

from ...domain.outcome_kinds import SkipReason, SolveStatus
from ..base import Outcome, SearchControl
from ..planning.job_orders import fcfs
from ..planning.job_selection import never_fits
from ..planning.node_profile import NodeProfile
from ..planning.problem import Job, Problem
from ..planning.promises import (
    Guard,
    PromiseBook,
    PromisePlan,
    fits_guarded,
    guard_of,
    keep_promises,
    place_guarded,
)
from ..planning.stopping import Stopped
from .now_set import choose_now_set


def decide_with_promises(
    problem: Problem, control: SearchControl, book: PromiseBook,
) -> Outcome:
    """The decision at t under the promise book (see the module's steps)."""
    settings, t = control.settings, problem.t
    outcome = Outcome(placements={}, status=SolveStatus.EMPTY)
    recalled = book.recall(problem, control.scope)
    never = {j.index for j in problem.jobs if never_fits(problem, j)}
    outcome.skipped.extend((i, SkipReason.NEVER_FITS) for i in sorted(never))
    held = {i: kept for i, kept in recalled.held.items() if i not in never}
    freed = recalled.room_freed
    for job in problem.jobs:  # a promise the caller sends back wins over the book's
        if job.promised is not None and job.index not in never:
            kept = held.get(job.index)
            if kept is None or kept[0] != job.promised - t:  # not the book's: placed anew
                held[job.index], freed = (job.promised - t, []), True
    # Who gets a promise now: every job that has waited promise_after_s, and the oldest ones
    # until one does not start now (EASY's head: whatever the threshold, it holds one).
    waiting = [j for j in fcfs(problem) if j.index not in never]
    if not held:
        every = _all_start_now(problem, waiting, control.first_fit)
        if every is not None:  # no promise to keep or make: every job starts, as EASY's would
            outcome.placements.update(every)
            outcome.considered.extend(every)
            outcome.status = SolveStatus.HEURISTIC if every else SolveStatus.EMPTY
            book.record(problem, recalled, {}, every)
            return outcome
    try:
        plan = keep_promises(
            problem, held, waiting, lambda j: t - j.submit >= settings.promise_after_s,
            control.first_fit, control.should_stop, compress=freed,
        )
    except Stopped:  # not even the held promises placed: nothing starts, the book stays
        outcome.status = SolveStatus.UNKNOWN
        return outcome
    outcome.placements.update(plan.due())
    outcome.considered.extend(plan.due())
    outcome.promises_moved.update(plan.moved)
    _start_the_others(problem, control, plan, never, outcome)
    _report_expected_starts(problem, control, plan, never, outcome)
    book.record(problem, recalled, plan.starts, outcome.placements)
    if outcome.placements and outcome.status == SolveStatus.EMPTY:
        outcome.status = SolveStatus.HEURISTIC
    return outcome


def _all_start_now(
    problem: Problem, waiting: list[Job], first_fit: bool,
) -> dict[int, list[int]] | None:
    """Every waiting job placed now in submit order on what is free now (the placements the
    promise book's own steps would give: each job's promise would be due), or None as soon
    as one does not fit. Most decisions of a lightly loaded system end here, without building
    a node profile."""
    free = problem.free_now.copy()
    placed: dict[int, list[int]] = {}
    for job in waiting:
        nodes = free.place(job.req, job.units, first_fit)
        if nodes is None:
            return None
        placed[job.index] = nodes
    return placed


def _start_the_others(
    problem: Problem, control: SearchControl, plan: PromisePlan, never: set[int],
    outcome: Outcome,
) -> None:
    """Steps 3: the jobs without a promise that fit now around every promise, by the model."""
    profile, guard = plan.profile, guard_of(plan)
    waiting = [j for j in problem.jobs_by_slowdown()
               if j.index not in plan.starts and j.index not in never]
    candidates: list[Job] = []
    left_out: list[Job] = []
    for job in waiting:
        if control.should_stop():
            break
        if len(candidates) < control.settings.window and fits_guarded(profile, job, 0, guard):
            candidates.append(job)
        else:
            left_out.append(job)
    outcome.skipped.extend((j.index, SkipReason.CANNOT_FIT_NOW) for j in left_out)
    if not candidates:
        return
    built = time.monotonic()
    chosen = choose_now_set(problem, profile, candidates, control)
    outcome.attempts, outcome.solve_seconds = chosen.attempts, chosen.solve_seconds
    outcome.variables, outcome.constraints = chosen.variables, chosen.constraints
    outcome.build_seconds = max(time.monotonic() - built - chosen.solve_seconds, 0.0)
    outcome.status = chosen.status
    placed = _place_now(profile, chosen.chosen, guard, control.first_fit)
    # Work conservation: whatever still fits starts too, highest priority first.
    placed.update(_place_now(profile, [j for j in candidates if j.index not in placed], guard,
                             control.first_fit))
    outcome.placements.update(placed)
    outcome.considered.extend(j.index for j in candidates)
    outcome.skipped.extend((j.index, SkipReason.BLOCKED) for j in candidates
                           if j.index not in placed)


def _place_now(profile: NodeProfile, jobs: list[Job], guard: Guard | None,
               first_fit: bool) -> dict[int, list[int]]:
    """Each of `jobs` started now, in the order given, where it still fits for all of d_i
    (off the oldest promise's nodes where it must: `Guard`); the others are left out."""
    placed: dict[int, list[int]] = {}
    for job in jobs:
        if fits_guarded(profile, job, 0, guard):
            placed[job.index] = place_guarded(profile, job, 0, guard, first_fit)
    return placed


def _report_expected_starts(
    problem: Problem, control: SearchControl, plan: PromisePlan, never: set[int],
    outcome: Outcome,
) -> None:
    """Step 4: each waiting job's promise, and for up to a window of the others the start a
    list schedule in priority order gives them after this decision, in the pooled view (an
    estimate: cheap enough for every decision, where a node-level one cost 10x the rest)."""
    pooled = problem.pooled_profile().copy()
    jobs = problem.jobs
    for i, (start, _) in plan.starts.items():
        pooled.reserve(jobs[i].demand(), start, jobs[i].duration)
        if start > 0:
            outcome.expected_starts[i] = (start, True)
    for i in outcome.placements:
        if i not in plan.starts:
            pooled.reserve(jobs[i].demand(), 0, jobs[i].duration)
    others: list[Job] = [j for j in problem.jobs_by_slowdown()
                         if j.index not in plan.starts and j.index not in never
                         and j.index not in outcome.placements][: control.settings.window]
    for job in others:
        if control.should_stop():
            return  # the rest get no estimate this time
        start = pooled.earliest_start(job.demand(), job.duration)
        pooled.reserve(job.demand(), start, job.duration)
        outcome.expected_starts[job.index] = (start, False)
