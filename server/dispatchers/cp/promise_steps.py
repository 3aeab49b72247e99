"""The promise book's steps of a CP decision (`decision_steps`, with `promise_after_s` >= 0).

A waiting job holds a promised start s_i once it has waited `promise_after_s` (0: from its
arrival), and the oldest job that does not start now always holds one (EASY's head). A promise
is kept from one decision to the next (`PromiseBook`, per caller scope and node list; or sent
back by the caller, `Job.promised`) and only ever moves earlier while the expected durations
d_i hold. The book's steps wrap the selected model's own (HCP'19, PCP'19, PCP'20):

1. *keep the promises* (first): the held promises are placed, compressed and given to the jobs
   that qualify now (`planning.promises.keep_promises`); the jobs whose promise is due start
   now, and every other promise becomes the room the decision protects
   (`planning.promise_room.PromiseRoom`): each promised job's units over [s_i, s_i + d_i);
2. *reduce to the window around the promises*: the jobs without a promise that fit now for all
   of d_i around every promise, the m highest-priority ones (the papers' fit-now filter and
   window, with the promises held);
3. the model's steps as under any profile: the list schedules, then the formulation with every
   promise in its capacity over time (s_i <= its promise for a held job, as a fixed block of
   its units), its objective and the δ / 2δ / δmax search decide what starts now and when the
   unpromised jobs of the window are planned; the work-conserving pass starts what else fits;
4. *keep every promise's room*: each start now is checked node by node against the promises
   (independently of the model that chose it) and placed elsewhere or left waiting where it
   would take a promise's room, so nothing started now moves a promise later; then every
   waiting job without a promise that fits now until its requested time around every promise
   and those starts starts too, in submit order (`start_what_fits_around_the_promises`: the
   model's plan of the unpromised jobs is an estimate and holds no room);
5. *record the promises*: each waiting job's promise, and the model's planned start of the
   window's other jobs (a pooled list schedule for up to m more), is reported (what
   `squeue --start` shows); the book keeps the promises for the next decision.

A decision that gives up answers EASY around the promises (`promise_fallback`).
"""

from __future__ import annotations

from collections.abc import Callable

from ...domain.outcome_kinds import PromiseMove, SkipReason, SolveStatus
from ..planning.job_orders import by_priority
from ..planning.job_selection import Selection, never_fits
from ..planning.oldest_first import with_started
from ..planning.problem import Job, Problem, at_limits, pooled_steps
from ..planning.promise_room import PromiseRoom
from ..planning.promises import PromisePlan, Recalled, guard_of, keep_promises, shape_of
from ..planning.start_estimates import StepPlan
from ..planning.stopping import Stopped, every_few
from .decision import Abandoned, Decision, Next, PromiseState


def keep_the_promises(d: Decision) -> Next:
    """Step 1: the promises placed, compressed and made; the due ones start now, the others
    are the room the rest of the decision protects."""
    problem, control, book = d.problem, d.control, d.dispatcher.promises
    t = problem.t
    limits = at_limits(problem)  # what the promises are computed against
    recalled = book.recall(limits, control.scope)
    never = {j.index for j in problem.jobs if never_fits(problem, j)}
    held = {i: kept for i, kept in recalled.held.items() if i not in never}
    reshaped = _reshaped(problem, recalled, held, never)  # promised anew (SHAPE_CHANGED)
    freed = recalled.room_freed or bool(reshaped)
    learned: list[Job] = []  # promises this book did not hold, sent back by the caller
    for job in problem.jobs:  # a promise the caller sends back (its token checked at the
        # edge), where this book holds none or a later one: the earlier of the two is kept
        if job.promised is not None and job.index not in never:
            kept = held.get(job.index)
            if kept is None or kept[0] > job.promised - t:  # not the book's: placed anew
                held[job.index], freed = (job.promised - t, []), True
                reshaped.pop(job.index, None)  # a promise made for its shape now
                if job.index not in recalled.held:
                    learned.append(job)
    d.promised = state = PromiseState(limits, recalled, never)
    waiting = [j for j in by_priority(limits) if j.index not in never]
    if not held:
        every = _all_start_now(problem, waiting, control.first_fit)
        if every is not None:  # no promise to keep or make: every job starts, as EASY's would
            d.outcome.skipped = [(i, SkipReason.NEVER_FITS) for i in sorted(never)]
            d.outcome.placements, d.outcome.considered = every, list(every)
            d.outcome.status = SolveStatus.HEURISTIC if every else SolveStatus.EMPTY
            book.record(limits, recalled, {}, every)
            return Next.DONE
    after = control.settings.promise_after_s
    try:
        plan = keep_promises(limits, held, waiting,
                             lambda j: j.index in reshaped or t - j.submit >= after,
                             control.first_fit, control.should_stop, compress=freed)
    except Stopped:  # not even the held promises placed: EASY decides (cp_dispatch), the
        raise Abandoned from None  # book stays
    state.plan = plan
    d.outcome.promises_moved.update(plan.moved)
    d.outcome.promise_move_reasons.update(plan.reasons)
    _say_why_promises_moved(d, plan, reshaped, learned)
    d.started_first = plan.due()
    d.problem = with_started(problem, d.started_first)
    ahead = {i: start for i, start in plan.starts.items() if start[0] > 0}
    d.reservation = PromiseRoom(plan.profile, guard_of(plan), ahead, frozenset(plan.starts))
    return Next.GO_ON


def _reshaped(problem: Problem, recalled: Recalled, held: dict[int, tuple[int, list[int]]],
              never: set[int]) -> dict[int, int]:
    """The jobs whose promise was made for another shape (units, request, requested time),
    job index -> that promise (absolute): taken out of `held`, they are promised anew. The
    book's own promises are compared with the job as sent; a caller-sent one the edge found
    signed for another shape (`Job.reshaped`) counts where the book holds none."""
    lost: dict[int, int] = {}
    for job in problem.jobs:
        kept = recalled.before.get((job.id, job.submit)) if job.index in held else None
        if kept is not None and kept.shape and kept.shape != shape_of(job):
            lost[job.index] = kept.start
            del held[job.index]
        elif job.reshaped is not None and job.index not in held and job.index not in never:
            lost[job.index] = job.reshaped
    return lost


def _say_why_promises_moved(d: Decision, plan: PromisePlan, reshaped: dict[int, int],
                            learned: list[Job]) -> None:
    """Each promise made anew for a new shape is reported SHAPE_CHANGED, with how much later
    than the lost one it is; a held promise that moved later behind an older one learned from
    the caller (another replica's) is reported OLDER_PROMISE."""
    outcome, t = d.outcome, d.problem.t
    for i, was in reshaped.items():
        outcome.promise_move_reasons[i] = PromiseMove.SHAPE_CHANGED
        now = plan.starts.get(i)
        if now is not None and t + now[0] > max(was, t):
            outcome.promises_moved[i] = t + now[0] - max(was, t)
    if learned:
        first = min((j.submit, j.id) for j in learned)
        jobs = d.problem.jobs
        for i in plan.moved:
            if (jobs[i].submit, jobs[i].id) > first:
                outcome.promise_move_reasons.setdefault(i, PromiseMove.OLDER_PROMISE)


def _all_start_now(
    problem: Problem, waiting: list[Job], first_fit: bool,
) -> dict[int, list[int]] | None:
    """Every waiting job placed now in submit order on what is free now (the placements the
    book's own steps would give: each job's promise would be due), or None as soon as one does
    not fit. Most decisions of a lightly loaded system end here, without a node profile."""
    free = problem.free_now.copy()
    placed: dict[int, list[int]] = {}
    masks = problem.eligibility  # a site's rules: where each job may start now
    for job in waiting:
        nodes = free.place(job.req, job.units, first_fit,
                           masks.now(job.index) if masks else None)
        if nodes is None:
            return None
        placed[job.index] = nodes
    return placed


def _room(d: Decision) -> PromiseRoom:
    room = d.reservation
    if not isinstance(room, PromiseRoom):
        raise RuntimeError("no promise room: the decision's steps are out of order")
    return room


def reduce_to_the_window_around_the_promises(d: Decision) -> Next:
    """Step 2: the jobs without a promise that fit now for all of d_i around every promise,
    in priority order, the m highest-priority ones (and at most `max_model_units` units)."""
    room, state = _room(d), d.promised
    assert state is not None
    window, max_units = d.settings.window, d.dispatcher.max_model_units
    selection = Selection()
    selection.skipped.extend((i, SkipReason.NEVER_FITS) for i in sorted(state.never))
    units = 0
    check = every_few(d.control.should_stop)
    units_fit = d.problem.free_now.units_fit  # what is free now bounds what the room leaves
    for job in d.problem.jobs_by_slowdown():
        if job.index in room.promised or job.index in state.never:
            continue
        if check():
            raise Abandoned
        if units_fit(job.req, job.units) < job.units or not room.fits(job):
            selection.skipped.append((job.index, SkipReason.CANNOT_FIT_NOW))
        elif len(selection.considered) >= window or (
            max_units is not None and units + job.units > max_units and selection.considered
        ):
            selection.skipped.append((job.index, SkipReason.OUTSIDE_WINDOW))
        else:
            selection.considered.append(job)
            units += job.units
    d.selection = selection
    return Next.GO_ON


def keep_every_promises_room(d: Decision) -> Next:
    """Step 4: the starts now, highest priority first, each on the model's nodes where they
    leave every promise its room, else on nodes around the promises, else not now."""
    room = _room(d).copy()
    pool = d.problem.free_now.copy()
    placements = d.outcome.placements
    kept: dict[int, list[int]] = {}
    rank = {j.index: k for k, j in enumerate(d.problem.jobs_by_slowdown())}
    by_index = d.problem.job_by_index()
    for i in sorted(placements, key=rank.__getitem__):
        job, nodes = by_index[i], placements[i]
        if room.keeps(job, nodes):  # the profile's first step is what is free now
            pool.take_all(nodes, job.req)
            room.take(pool, nodes, job)
            kept[i] = nodes
            continue
        moved = room.place(pool, job, d.control.first_fit)
        if moved is not None:
            kept[i] = moved
        else:
            d.outcome.skipped.append((i, SkipReason.BLOCKED))
    d.outcome.placements = kept
    d.after_starts = (room, pool, frozenset(kept))
    return Next.GO_ON


def start_what_fits_around_the_promises(d: Decision) -> Next:
    """Step 4b: every waiting job without a promise that fits now until its requested time
    around every promise and what starts now starts too, in submit order (EASY's backfill
    around the promises). The model's plan of the unpromised jobs is an estimate, not a
    promise: it holds no room that a job fitting now must leave idle (work conservation, issue
    #49). Past the deadline, the starts so far stand."""
    added = backfill_around_the_promises(d, every_few(d.control.should_stop))
    if added:
        started = set(added)
        d.outcome.considered.extend(i for i in added if i not in d.outcome.considered)
        d.outcome.skipped = [(i, why) for i, why in d.outcome.skipped if i not in started]
        if d.outcome.status == SolveStatus.EMPTY:
            d.outcome.status = SolveStatus.HEURISTIC
    return Next.GO_ON


def backfill_around_the_promises(d: Decision, should_stop: Callable[[], bool]) -> list[int]:
    """The waiting jobs without a promise, in submit order, that fit now until their requested
    time around every promise and the starts of `d.outcome.placements` (added to them, placed
    by `PromiseRoom.place`): their indices, until `should_stop()` says stop."""
    state = d.promised
    assert state is not None
    room, pool, taken = d.after_starts or (_room(d).copy(), d.problem.free_now.copy(),
                                           frozenset())
    d.after_starts = None  # taken on here
    by_index = d.problem.job_by_index()
    placements = d.outcome.placements
    for i, nodes in placements.items():
        if i not in taken:
            pool.take_all(nodes, by_index[i].req)
            room.take(pool, nodes, by_index[i])
    added: list[int] = []
    units_fit, first_fit = pool.units_fit, d.control.first_fit
    # The window's step found these not to fit around the promises: with the starts since,
    # they fit still less.
    known = {i for i, why in d.selection.skipped if why == SkipReason.CANNOT_FIT_NOW}
    for job in by_priority(d.problem):
        i = job.index
        if i in placements or i in room.promised or i in state.never or i in known:
            continue
        if units_fit(job.req, job.units) < job.units:
            continue
        if should_stop():
            break
        # What the job may use until its requested time (its start pool's group count), before
        # the placement chooses nodes in it.
        if room.pool_for(job, pool).units_fit(job.req, job.units) < job.units:
            continue
        placed = room.place(pool, job, first_fit)
        if placed is not None:
            placements[i] = placed
            added.append(i)
    return added


def record_the_promises(d: Decision) -> Next:
    """Step 5: each waiting job's promise and the window's planned starts are reported, and
    the book keeps the promises for the next decision."""
    state = d.promised
    assert state is not None and state.plan is not None
    plan, outcome = state.plan, d.outcome
    started = {**d.started_first, **outcome.placements}
    accounted = set(outcome.considered) | {i for i, _ in outcome.skipped}
    for i, (start, _) in plan.starts.items():
        if start > 0:
            outcome.expected_starts[i] = (start, True)
            if i not in accounted:  # in the model as capacity it holds over time
                outcome.considered.append(i)
    outcome.likely_starts.update(_likely_starts(d, plan, started))
    _report_planned_starts(d, plan, started)
    d.dispatcher.promises.record(state.problem, state.recalled, plan.starts, started)
    return Next.GO_ON


def _likely_starts(d: Decision, plan: PromisePlan, started: dict[int, list[int]]
                   ) -> dict[int, int]:
    """Beside each promise, its likely start: a pooled list schedule of the predicted d_i
    (running work to its predicted end, the due promises and what the model starts now, then
    the promised jobs in promise order), never later than the promise."""
    jobs = d.problem.job_by_index()  # predicted; the due promises are its running work
    steps = StepPlan(*pooled_steps(d.problem))
    steps.hold_all([(jobs[i].demand(), 0, jobs[i].duration) for i in started if i in jobs])
    likely: dict[int, int] = {}
    for i, (start, _) in sorted(plan.starts.items(), key=lambda item: (item[1][0], item[0])):
        job = jobs.get(i)
        if start <= 0 or i in started or job is None:
            continue
        try:
            likely[i] = min(start, steps.earliest(job.demand(), job.duration))
        except ValueError:  # more than the pooled capacity (not a promise that holds one)
            continue
        steps.hold(job.demand(), likely[i], job.duration)
    return likely


def _report_planned_starts(d: Decision, plan: PromisePlan, started: dict[int, list[int]]
                           ) -> None:
    """The window's jobs not started now at the model's planned start; up to m more of the
    others at the start a pooled list schedule in priority order gives them around it."""
    outcome, settings = d.outcome, d.settings
    planned = d.plan.start_offsets if d.plan is not None else {}
    pooled = StepPlan(*_room(d).pooled_steps())
    jobs = d.problem.job_by_index()
    pooled.hold_all([(jobs[i].demand(), 0, jobs[i].duration) for i in started if i in jobs])
    for job in d.jobs:
        start = planned.get(job.index)
        if job.index not in started and start is not None and start > 0:
            outcome.expected_starts[job.index] = (start, False)
            pooled.hold(job.demand(), start, job.duration)
    assert d.promised is not None
    others = [j for j in d.problem.jobs_by_slowdown()
              if j.index not in plan.starts and j.index not in d.promised.never
              and j.index not in started and j.index not in outcome.expected_starts]
    for job in others[: settings.window]:
        if d.control.should_stop():
            return  # the rest get no estimate this time
        outcome.expected_starts[job.index] = (pooled.plan(job.demand(), job.duration), False)
