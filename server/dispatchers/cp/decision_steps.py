"""The steps of a CP decision, in order; each says from the settings (or the model) whether it
applies, so that a new profile knob is a new step, not a new branch of `CpDispatcher.decide`.

0. with `easy_head`, EASY's head discipline: the oldest jobs start now in EASY's queue order
   (priority, then submit order) while they fit (with a site's rules, on their start-now
   nodes, as EASY places them), and the rest of the decision is on the problem they leave
   (its first blocked job in that order holds the head reservation);
1. the papers' reductions: the fit-now filter, then the window of the m highest-priority jobs;
   with the starvation guard (`SearchSettings.starvation_wait_s`), an overdue oldest job that
   fits now leads the window and must start now, and one that does not fit holds the head
   reservation (otherwise `protect_head` says who holds it);
2. the heuristic plan: the best list schedule (priority and submit order, and with
   `more_orders` SJF, F1 and WFP3 order), so that a decision exists whatever the solver does;
   with `capacity_first`, the list schedule that starts LOS's packing first (the most
   processors now around the reservation) when it starts more processors now;
   when it starts every job now (placed node by node), it is optimal and decides; with a
   site's rules (`planning.eligibility`), a start now of it outside the job's start-now nodes
   (E_i less the windows it would run into) is placed again on them, or else put off (the plan
   then no longer compares with the model's, whose starts now keep the rules);
3. the model (`Formulation`), with its own list schedule where the shared one is not a solution
   of it, and now_i = 1 for a guarded job that the heuristic plan starts now; with
   `capacity_first`, Σ n_i now_i at least the heuristic plan's;
4. the δ / 2δ / δmax restart policy, each attempt hinted with the best plan so far;
5. the better of the solver's best plan and the heuristic plan (by total slowdown), after the
   left shift, placed node by node; with `work_conserving`, queued jobs outside the model that
   fit now around the plan and the reservation start too;
6. with `easy_head_depth` k > 1, the next k - 1 blocked jobs in submit order hold EASY-k's
   reservations, and a start that would delay one of them waits (`later_reservations`);
7. with a site's rules, any start now a pass after the model made outside the job's start-now
   nodes (the left shift, the work-conserving passes: list placements) waits instead; under
   the promise book, before the promises are recorded (so the book records what starts).

Under the promise book (`promise_after_s` >= 0) the book's steps (`promise_steps`) take the
place of 0 and of the window's filter, and wrap the rest: every promise is the room the model
and the list schedules protect (as the head's reservation is otherwise), the starts now are
checked against every promise node by node, every job that fits now around the promises starts
too, and the promises are reported and kept; a decision cut after its promises were placed
answers EASY around them (`promise_fallback`).

Every step honours the decision's deadline and its caller (`SearchControl.should_stop`). A model
that is not built by the deadline gives way to the heuristic plan; once the caller is gone, the
decision is abandoned at once (`Abandoned`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import structlog

from ...domain.outcome_kinds import SolveStatus
from ..planning.greedy_schedule import best_list_schedule, greedy_schedule, total_slowdown
from ..planning.job_orders import processors
from ..planning.job_selection import select_for_model
from ..planning.later_reservations import keep_later_reservations
from ..planning.left_shift import left_shift
from ..planning.list_orders import best_of_orders
from ..planning.oldest_first import oldest_that_fit, with_started
from ..planning.plan import Plan
from ..planning.problem import later_start_bounds
from ..planning.processor_packing import packed_first, processors_now
from ..planning.reservation import Reservation
from ..planning.starvation_guard import guarded_job, with_guarded_first
from ..planning.stopping import Stopped
from ..planning.work_conservation import start_what_fits
from .cp_schedule import weighted_slowdown
from .cpsat_attempt import model_size
from .decision import Abandoned, Decision, Next
from .policy_attempt import policy_attempt
from .promise_steps import (
    keep_every_promises_room,
    keep_the_promises,
    record_the_promises,
    reduce_to_the_window_around_the_promises,
    start_what_fits_around_the_promises,
)
from .restart_policy import run_restart_policy
from .start_now_rules import breaking_the_rules, place_again_within_rules

log = structlog.get_logger("hpcdispatch.dispatchers")

T = TypeVar("T")


def _known(value: T | None, what: str) -> T:
    if value is None:
        raise RuntimeError(f"no {what} yet: the decision's steps are out of order")
    return value


def _always(d: Decision) -> bool:
    return True


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a decision: `run` when `applies`; `Next.DONE` ends the decision, but for
    the `closing` steps, which run (when they apply) however it ended."""

    name: str
    run: Callable[[Decision], Next]
    applies: Callable[[Decision], bool] = _always
    closing: bool = False


# 1. The window -----------------------------------------------------------------------------


def start_the_oldest_that_fit(d: Decision) -> Next:
    """EASY's head discipline: the oldest jobs start now in EASY's queue order (priority, then
    submit order) while they fit (placed node by node on their start-now nodes, as EASY places
    them); the rest of the decision is on the problem they leave, whose first blocked job in
    that order holds the head reservation."""
    try:
        d.started_first = oldest_that_fit(d.problem, d.control.first_fit,
                                          d.control.should_stop)  # on start-now nodes
    except Stopped:
        raise Abandoned from None
    d.problem = with_started(d.problem, d.started_first)
    return Next.GO_ON


def reduce_to_window(d: Decision) -> Next:
    """The jobs that fit now, then the m highest-priority ones (and at most
    `max_model_units` units, for models with variables per unit)."""
    try:
        d.selection = select_for_model(
            d.problem, d.settings.window, d.dispatcher.max_model_units, d.control.should_stop
        )
    except Stopped:
        raise Abandoned from None
    return Next.GO_ON


def guard_the_oldest(d: Decision) -> Next:
    """An overdue oldest job (q_i at least `starvation_wait_s` ago) that fits now leads the
    window; one that does not fit now will hold the head reservation."""
    d.guarded = guarded_job(d.problem, d.selection, d.settings.starvation_wait_s)
    if d.guarded is not None and d.guarded.fits_now:
        d.selection = with_guarded_first(d.selection, d.guarded)
    return Next.GO_ON


def open_the_window(d: Decision) -> Next:
    """The window's jobs are the decision's; with none there is nothing to decide."""
    d.jobs = d.selection.considered
    d.outcome.considered = [j.index for j in d.jobs]
    d.outcome.skipped = d.selection.skipped
    if not d.jobs:
        return Next.DONE
    d.start_build_clock()
    return Next.GO_ON


def reserve_for_the_head(d: Decision) -> Next:
    """EASY's reservation for the guarded job, or with `protect_head` the oldest blocked one:
    the earliest τ its units fit node by node, which nothing started now may delay."""
    try:
        d.reservation = d.dispatcher.head_reservation(
            d.problem, d.selection, d.settings, d.control.should_stop, d.guarded
        )
    except Stopped:  # no plan yet, not even a heuristic one: nothing starts
        raise Abandoned from None
    return Next.GO_ON


def _head_is_protected(d: Decision) -> bool:
    return not _promises(d) and d.dispatcher.protects_head and (
        d.guarded is not None or d.settings.protect_head or d.settings.easy_head
    )


# 2. The heuristic plan ---------------------------------------------------------------------


def plan_by_list_schedules(d: Decision) -> Next:
    """The better list schedule of the window in priority and in submit order."""
    try:
        d.heuristic, d.heuristic_objective = best_list_schedule(
            d.problem, d.jobs, d.dispatcher.exact_allocation_now, d.control.first_fit,
            d.reservation, d.control.should_stop,
        )
    except Stopped:
        raise Abandoned from None
    return Next.GO_ON


def plan_by_more_orders(d: Decision) -> Next:
    """The SJF, F1 and WFP3 list schedules too (a guarded job first in each): the best wins."""
    try:
        d.heuristic, d.heuristic_objective = best_of_orders(
            d.problem, d.jobs, (_known(d.heuristic, "heuristic plan"), d.heuristic_objective),
            d.dispatcher.exact_allocation_now, d.control.first_fit, d.reservation, d.pinned,
            d.control.should_stop,
        )
    except Stopped:
        raise Abandoned from None
    return Next.GO_ON


def plan_the_most_processors_now(d: Decision) -> Next:
    """Capacity first: the list schedule that starts LOS's packing now (the set with the most
    processors now that delays no reservation), then the others, replaces the heuristic plan
    when it starts more processors now (and the guarded job, if one fits now, still now)."""
    heuristic = _known(d.heuristic, "heuristic plan")
    if not any(heuristic.start_offsets[j.index] for j in d.jobs):
        return Next.GO_ON  # every job starts now: no set starts more processors
    try:
        packed = greedy_schedule(
            d.problem, packed_first(d.problem, d.jobs, d.reservation),
            d.dispatcher.exact_allocation_now, d.control.first_fit, d.reservation,
            d.control.should_stop,
        )
    except Stopped:
        raise Abandoned from None
    pinned = d.pinned
    if pinned is not None and packed.start_offsets[pinned.index] != 0:
        return Next.GO_ON  # the guarded job starts now whatever else does
    if processors_now(d.problem, d.jobs, packed) > processors_now(d.problem, d.jobs, heuristic):
        d.heuristic = packed
        d.heuristic_objective = total_slowdown(d.problem, d.jobs, packed.start_offsets)
    return Next.GO_ON


def take_a_plan_that_starts_all_now(d: Decision) -> Next:
    """Every job of the window starts now, placed node by node: each s_i is at its lower bound
    t, so no plan has a lower total slowdown and there is nothing to search (most decisions on
    a lightly loaded system, e.g. LLNL-Atlas)."""
    heuristic = _known(d.heuristic, "heuristic plan")
    if any(heuristic.start_offsets[j.index] != 0 for j in d.jobs):
        return Next.GO_ON
    d.stop_build_clock()
    d.outcome.status, d.outcome.objective = SolveStatus.OPTIMAL, d.heuristic_objective
    d.decide_with(heuristic, heuristic.placements())
    return Next.GO_ON


def hold_the_heuristic_plan_to_the_rules(d: Decision) -> Next:
    """A start now of the heuristic plan outside its job's start-now nodes (a list schedule
    places on any node) is placed again on them, around the plan's other starts and the
    protected room, or else put off to the job's later bound: the plan is then still a
    decision that keeps the rules, but no solution of the model, so that the solver's plan
    wins when it has one."""
    heuristic = _known(d.heuristic, "heuristic plan")
    now = {j.index: heuristic.unit_nodes[j.index] for j in d.jobs
           if heuristic.start_offsets[j.index] == 0 and j.index in heuristic.unit_nodes}
    broken = breaking_the_rules(d.problem, now)
    if not broken:
        return Next.GO_ON
    placed = place_again_within_rules(d.problem, now, broken, d.reservation,
                                      d.control.first_fit)
    offsets = dict(heuristic.start_offsets)
    later = later_start_bounds(d.problem, d.jobs)
    for i in broken - set(placed):
        offsets[i] = later[i]
        d.within_rules = False
    nodes = {i: n for i, n in heuristic.unit_nodes.items() if i not in broken}
    nodes.update(placed)
    d.heuristic = Plan(offsets, nodes, heuristic.unit_counts)
    d.heuristic_objective = total_slowdown(d.problem, d.jobs, offsets)
    return Next.GO_ON


def _has_rules(d: Decision) -> bool:
    return d.problem.eligibility is not None


# 3. The model ------------------------------------------------------------------------------


def build_the_model(d: Decision) -> Next:
    """The dispatcher's formulation of the window; past the deadline before it is built, the
    heuristic plan decides."""
    heuristic = _known(d.heuristic, "heuristic plan")
    try:
        d.formulation = d.dispatcher.formulate(
            d.problem, d.jobs, d.control.should_stop, heuristic, d.reservation
        )
    except Stopped:
        d.stop_build_clock()
        if d.control.cancelled():
            raise Abandoned from None
        if d.settings.deterministic:
            log.warning("deterministic search cut by the deadline before the model was "
                        "built: decision not reproducible", dispatcher=d.dispatcher.name)
        d.outcome.status, d.outcome.objective = SolveStatus.HEURISTIC, d.heuristic_objective
        d.decide_with(heuristic, heuristic.placements())
        return Next.GO_ON
    d.outcome.variables, d.outcome.constraints = model_size(d.formulation.model)
    return Next.GO_ON


def adopt_the_models_list_schedule(d: Decision) -> Next:
    """Where the shared heuristic plan is no solution of the model (PCP'19), the model's own
    list schedule replaces it; either way, say whether its objective compares."""
    formulation = _known(d.formulation, "model")
    own = formulation.own_list_schedule()
    if own is not None:
        d.heuristic = own
        d.heuristic_objective = total_slowdown(d.problem, d.jobs, own.start_offsets)
    # (a stand-in formulation that does not say counts as one the pooled plans fit)
    fits = getattr(formulation, "pooled_plans_fit", True)
    shared_fits = d.dispatcher.heuristic_in_model and d.within_rules and fits
    d.comparable = shared_fits or own is not None
    return Next.GO_ON


def pin_the_guarded_job(d: Decision) -> Next:
    """now_i = 1 for the guarded job when the heuristic plan starts it now (the hinted plan
    does so: the model stays feasible)."""
    formulation, pinned = _known(d.formulation, "model"), _known(d.pinned, "guarded job")
    if _known(d.heuristic, "heuristic plan").start_offsets[pinned.index] == 0:
        at = next(k for k, j in enumerate(formulation.schedule.jobs) if j is pinned)
        formulation.model.add(formulation.schedule.now_literals[at] == 1)
    return Next.GO_ON


def hold_the_processors_started_now(d: Decision) -> Next:
    """Capacity first: Σ n_i now_i is at least what the heuristic plan starts now (the model's
    hint, so the model stays feasible), and among such plans the objective is the papers'."""
    formulation = _known(d.formulation, "model")
    schedule = formulation.schedule
    bound = processors_now(d.problem, schedule.jobs, _known(d.heuristic, "heuristic plan"))
    formulation.model.add(
        sum(processors(d.problem, j) * now
            for j, now in zip(schedule.jobs, schedule.now_literals, strict=True)) >= bound
    )
    return Next.GO_ON


def finish_the_build(d: Decision) -> Next:
    """The model is built: its time is recorded, and a caller who left ends the decision."""
    d.stop_build_clock()
    if d.control.cancelled():
        raise Abandoned
    return Next.GO_ON


def _modelled(d: Decision) -> bool:
    return d.formulation is not None


def _guard_pins(d: Decision) -> bool:
    return d.formulation is not None and d.pinned is not None


# 4. The search -----------------------------------------------------------------------------


def search_under_the_restart_policy(d: Decision) -> Next:
    """δ / 2δ / δmax attempts, each hinted with the best plan so far (the heuristic first)."""
    attempt = policy_attempt(
        d.problem, d.jobs, _known(d.formulation, "model"), _known(d.heuristic, "heuristic plan"),
        d.control,
    )
    d.policy = policy = run_restart_policy(
        attempt, d.settings, d.control.deadline, d.control.cancelled
    )
    d.outcome.attempts = policy.attempts
    d.outcome.solve_seconds = policy.solve_seconds
    if d.settings.deterministic and policy.deadline_cut:
        log.warning("deterministic search cut by the deadline: decision not reproducible",
                    dispatcher=d.dispatcher.name, attempts=len(policy.attempts))
    if d.control.cancelled():
        raise Abandoned
    return Next.GO_ON


# 5. The decision ---------------------------------------------------------------------------


def choose_the_plan(d: Decision) -> Next:
    """The solver's best plan when it is no worse than the heuristic plan by the model's
    objective, Σ w_i slowdown_i (or when the two do not compare), else the heuristic plan; a
    proof of infeasibility of a model the heuristic plan is no solution of means the jobs
    wait."""
    policy, heuristic = _known(d.policy, "search"), _known(d.heuristic, "heuristic plan")
    if policy.status == SolveStatus.INFEASIBLE and not d.comparable:
        d.outcome.status = SolveStatus.INFEASIBLE
        return Next.DONE
    if policy.status in (SolveStatus.INFEASIBLE, SolveStatus.MODEL_INVALID):
        # The heuristic plan is a solution of this model, so the model is wrong: say so
        # (logged and counted under this status) and decide with the heuristic plan.
        log.error("CP model rejected a known solution", dispatcher=d.dispatcher.name,
                  status=policy.status.name.lower())
        d.plan, d.outcome.status = heuristic, policy.status
    elif policy.best is not None and policy.objective is not None and (
        not d.comparable
        or policy.objective <= weighted_slowdown(d.problem, d.jobs, heuristic.start_offsets)
        + 1e-9
    ):
        d.plan, d.outcome.status = policy.best, policy.status
    else:  # the solver found nothing better: decide with the heuristic plan
        d.plan, d.outcome.status = heuristic, SolveStatus.HEURISTIC
    return Next.GO_ON


def shift_left(d: Decision) -> Next:
    """Each job of the chosen plan as early as the others let it (`left_shift`)."""
    d.plan = left_shift(
        d.problem, d.jobs, _known(d.plan, "chosen plan"), d.reservation,
        d.dispatcher.exact_allocation_now, d.control.first_fit,
    )
    d.outcome.objective = total_slowdown(d.problem, d.jobs, d.plan.start_offsets)
    return Next.GO_ON


def allocate_nodes(d: Decision) -> Next:
    """The model's nodes for the jobs the chosen plan starts at t."""
    formulation = _known(d.formulation, "model")
    d.placements = formulation.allocate(_known(d.plan, "chosen plan"), d.control.first_fit)
    return Next.GO_ON


def _searched(d: Decision) -> bool:
    return d.policy is not None


def place(d: Decision) -> Next:
    """The decision's placements: the jobs of the window that start at t."""
    d.outcome.placements = _known(d.placements, "placements")
    return Next.GO_ON


def start_what_fits_around(d: Decision) -> Next:
    """Queued jobs outside the window that fit now around the plan and the reservation start
    too (time permitting: past the deadline, the plan's own starts stand, and the steps after
    this one still apply)."""
    placements = _known(d.placements, "placements")
    try:
        extended = start_what_fits(
            d.problem, d.jobs, _known(d.plan, "chosen plan"), placements, d.reservation,
            d.control.first_fit, d.control.should_stop,
        )
    except Stopped:
        return Next.GO_ON
    added = [i for i in extended if i not in placements]
    if added:
        d.outcome.placements = extended
        d.outcome.considered.extend(added)
        started = set(added)
        d.outcome.skipped = [(i, why) for i, why in d.outcome.skipped if i not in started]
    return Next.GO_ON


def keep_the_later_reservations(d: Decision) -> Next:
    """With `easy_head_depth` k > 1, the next k - 1 blocked jobs in submit order hold EASY-k's
    reservations too, and a start that would delay one of them waits; stopped before that is
    known (the deadline, the caller gone), only the oldest jobs started first start."""
    placements = d.outcome.placements
    head = d.reservation
    if not isinstance(head, Reservation):
        raise RuntimeError("no head reservation: the decision's steps are out of order")
    try:
        kept, _ = keep_later_reservations(
            d.problem, placements, head,
            d.settings.easy_head_depth, d.control.first_fit, d.control.should_stop,
        )
    except Stopped:
        kept = {}
    d.outcome.placements = kept
    return Next.GO_ON


def keep_to_the_rules(d: Decision) -> Next:
    """A start now outside its job's start-now nodes is placed again on them, around the
    other starts and the protected room, or waits: the model's own starts keep the rules, but
    the passes after it (the left shift, the work-conserving passes, around the promises too)
    place as list schedules do, on any node. With EASY-k's later reservations kept, it waits
    (a new placement could delay one). The starts of due promises (`Decision.started_first`)
    are the book's own."""
    placements = d.outcome.placements
    broken = breaking_the_rules(d.problem, placements)
    if not broken:
        return Next.GO_ON
    if _keeps_later_reservations(d):
        d.outcome.placements = {i: n for i, n in placements.items() if i not in broken}
    else:
        d.outcome.placements = place_again_within_rules(
            d.problem, placements, broken, d.reservation, d.control.first_fit)
    return Next.GO_ON


def _keeps_later_reservations(d: Decision) -> bool:
    return (
        d.settings.easy_head and d.settings.easy_head_depth > 1 and d.decided
        and d.reservation is not None and bool(d.outcome.placements)
    )


def _undecided(d: Decision) -> bool:
    return not d.decided


def _decided(d: Decision) -> bool:
    return d.decided


def _conserves_work(d: Decision) -> bool:
    return d.settings.work_conserving and d.decided


def _promises(d: Decision) -> bool:
    return d.settings.promise_after_s >= 0


def _no_promises(d: Decision) -> bool:
    return d.settings.promise_after_s < 0


def _promises_kept(d: Decision) -> bool:
    return d.promised is not None and d.promised.plan is not None


DECISION_STEPS: tuple[Step, ...] = (
    Step("keep the promises", keep_the_promises, _promises),
    Step("start the oldest that fit", start_the_oldest_that_fit,
         lambda d: d.settings.easy_head and _no_promises(d)),
    Step("reduce to the window", reduce_to_window, _no_promises),
    Step("reduce to the window around the promises", reduce_to_the_window_around_the_promises,
         _promises),
    Step("guard the oldest job", guard_the_oldest,
         lambda d: d.settings.starvation_wait_s > 0 and _no_promises(d)),
    Step("open the window", open_the_window),
    Step("reserve for the head", reserve_for_the_head, _head_is_protected),
    Step("plan by list schedules", plan_by_list_schedules),
    Step("plan by more orders", plan_by_more_orders, lambda d: d.settings.more_orders),
    Step("plan the most processors now", plan_the_most_processors_now,
         lambda d: d.settings.capacity_first),
    Step("hold the heuristic plan to the rules", hold_the_heuristic_plan_to_the_rules,
         _has_rules),
    Step("take a plan that starts all now", take_a_plan_that_starts_all_now,
         lambda d: d.dispatcher.exact_allocation_now),
    Step("build the model", build_the_model, _undecided),
    Step("adopt the model's list schedule", adopt_the_models_list_schedule, _modelled),
    Step("pin the guarded job", pin_the_guarded_job, _guard_pins),
    Step("hold the processors started now", hold_the_processors_started_now,
         lambda d: d.settings.capacity_first and _modelled(d)),
    Step("finish the build", finish_the_build, _modelled),
    Step("search under the restart policy", search_under_the_restart_policy, _modelled),
    Step("choose the plan", choose_the_plan, _searched),
    Step("shift left", shift_left, _searched),
    Step("allocate nodes", allocate_nodes, _searched),
    Step("place", place, _decided),
    Step("keep every promise's room", keep_every_promises_room,
         lambda d: _promises(d) and _decided(d)),
    Step("start what fits around", start_what_fits_around, _conserves_work),
    Step("keep the later reservations", keep_the_later_reservations, _keeps_later_reservations),
    Step("start what fits around the promises", start_what_fits_around_the_promises,
         _promises_kept, closing=True),
    Step("keep to the rules", keep_to_the_rules,
         lambda d: _has_rules(d) and (_decided(d) or _promises_kept(d)), closing=True),
    Step("record the promises", record_the_promises, _promises_kept, closing=True),
)
