"""What the CP dispatchers share: reductions, heuristic plan, restart policy, result selection.

A formulation (HCP'19, PCP'19, PCP'20) builds its model for the selected jobs, turns a plan
into solver hints, reads a plan back from a solution, and says where the jobs starting at t go.
This module runs the rest the same way for all of them:

1. the papers' reductions: the fit-now filter, then the window of the m highest-priority jobs;
   with the starvation guard (`starvation_guard`, `SearchSettings.starvation_wait_s`), an
   overdue oldest job that fits now leads the window and must start now, and one that does not
   fit holds the head reservation (otherwise `protect_head` says who holds it);
2. the heuristic plan: the best list schedule (priority and submit order, and with
   `more_orders` SJF, F1 and WFP3 order, `list_orders`), so that a decision exists whatever the
   solver does;
3. the δ / 2δ / δmax restart policy, each attempt hinted with the best plan so far (the
   heuristic plan first); skipped when the heuristic plan starts every job now (that is
   optimal);
4. the better of the solver's best plan and the heuristic plan (by total slowdown) is the
   decision, after the work-conserving pass (`left_shift`); with `work_conserving`, queued jobs
   outside the model that fit now around the plan and the reservation start too
   (`work_conservation`).

Every stage honours the decision's deadline and its caller (`SearchControl.should_stop`, asked
between stages and once per job, or every few jobs, inside them). A model that is not built by
the deadline gives way to the heuristic plan; once the caller is gone, the decision is
abandoned at once: an outcome with no placements (nobody will read it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import ClassVar, Protocol

import structlog
from ortools.sat.python import cp_model

from hpcdispatch.v1 import dispatcher_pb2 as pb

from ..base import Outcome, SearchControl, SearchSettings
from ..planning.greedy_schedule import best_list_schedule, total_slowdown
from ..planning.job_selection import Selection, select_for_model
from ..planning.left_shift import left_shift
from ..planning.list_orders import best_of_orders
from ..planning.plan import Plan
from ..planning.problem import Job, Problem
from ..planning.reservation import Reservation, reserve
from ..planning.starvation_guard import (
    Guarded,
    guarded_job,
    with_guarded_first,
)
from ..planning.stopping import StopCheck, Stopped, never
from ..planning.work_conservation import start_what_fits
from .cp_schedule import ScheduleModel
from .cpsat_attempt import (
    Hint,
    SolutionValues,
    model_size,
    solve_attempt,
)
from .restart_policy import AttemptResult, run_restart_policy

log = structlog.get_logger("hpcdispatch.dispatchers")


class Formulation(Protocol):
    model: cp_model.CpModel
    schedule: ScheduleModel

    def hint(self, plan: Plan) -> list[tuple[cp_model.IntVar, int]]: ...

    def own_list_schedule(self) -> Plan | None:
        """A list schedule that is a solution of this very model, where the shared heuristic
        plan is not one (None: the shared one is, or there was no time to finish it)."""
        ...

    def extract(self, values: SolutionValues) -> Plan: ...

    def allocate(self, plan: Plan, first_fit: bool) -> dict[int, list[int]]: ...


class CpDispatcher:
    """Base of the CP dispatchers; subclasses say how to build their formulation."""

    name: ClassVar[str]
    kind: ClassVar[int]
    # Whether the heuristic plan places jobs on nodes at t (exact-allocation models).
    exact_allocation_now: ClassVar[bool] = True
    # Whether the heuristic plan is a solution of this model (same capacity view over time), so
    # that its objective compares with the solver's. PCP'19 models the future node by node,
    # where the pooled list schedule is optimistic: there any solver solution wins.
    heuristic_in_model: ClassVar[bool] = True
    # Whether the model can protect a head job's reservation (SearchSettings.protect_head).
    protects_head: ClassVar[bool] = True
    # Largest Σ rn_i in one model, for models with variables per unit (None: no limit).
    max_model_units: ClassVar[int | None] = None

    def formulate(
        self,
        problem: Problem,
        jobs: list[Job],
        should_stop: StopCheck,
        heuristic: Plan,
        reservation: Reservation | None,
    ) -> Formulation:
        """Build the model; raises Stopped when `should_stop()` turns true meanwhile."""
        raise NotImplementedError

    def head_reservation(
        self,
        problem: Problem,
        selection: Selection,
        settings: SearchSettings,
        should_stop: StopCheck = never,
        guarded: Guarded | None = None,
    ) -> Reservation | None:
        """EASY's protection for the oldest job that cannot start now, when the settings ask
        for it and this model can hold it; with a guarded job (`starvation_guard`), for that
        job when it cannot start now, and for none when it starts now."""
        if not self.protects_head:
            return None
        if guarded is not None:
            if guarded.fits_now:
                return None
            return reserve(problem, problem.free_now.copy(), guarded.job, should_stop=should_stop)
        if not settings.protect_head:
            return None
        blocked = [
            problem.jobs[i] for i, why in selection.skipped if why == pb.SKIP_REASON_CANNOT_FIT_NOW
        ]
        if not blocked:
            return None
        head = min(blocked, key=lambda j: (j.submit, j.index))
        return reserve(problem, problem.free_now.copy(), head, should_stop=should_stop)

    def heuristic_plan(
        self,
        problem: Problem,
        jobs: list[Job],
        reservation: Reservation | None,
        first_fit: bool,
        should_stop: StopCheck = never,
        more_orders: bool = False,
        pinned: Job | None = None,
    ) -> tuple[Plan, float]:
        """The best list schedule of `jobs` and its total slowdown: priority and submit order,
        and with `more_orders` the SJF, F1 and WFP3 orders too (`pinned` first in each)."""
        best = best_list_schedule(
            problem, jobs, self.exact_allocation_now, first_fit, reservation, should_stop
        )
        if more_orders:
            best = best_of_orders(
                problem, jobs, best, self.exact_allocation_now, first_fit, reservation,
                pinned, should_stop,
            )
        return best

    def decide(self, problem: Problem, control: SearchControl) -> Outcome:
        should_stop = control.should_stop
        outcome = Outcome(placements={}, status=pb.SOLVE_STATUS_EMPTY)
        try:
            selection = select_for_model(
                problem, control.settings.window, self.max_model_units, should_stop
            )
        except Stopped:
            return _abandoned(outcome)
        settings = control.settings
        guarded = guarded_job(problem, selection, settings.starvation_wait_s)
        pinned = guarded.job if guarded is not None and guarded.fits_now else None
        if guarded is not None and guarded.fits_now:
            selection = with_guarded_first(selection, guarded)
        jobs = selection.considered
        outcome.considered = [j.index for j in jobs]
        outcome.skipped = selection.skipped
        if not jobs:
            return outcome

        built = time.monotonic()
        try:
            reservation = self.head_reservation(
                problem, selection, settings, should_stop, guarded
            )
            heuristic, heuristic_objective = self.heuristic_plan(
                problem, jobs, reservation, control.first_fit, should_stop,
                settings.more_orders, pinned,
            )
        except Stopped:
            # No plan yet, not even a heuristic one: nothing starts.
            outcome.build_seconds = time.monotonic() - built
            return _abandoned(outcome)
        if self.exact_allocation_now and all(heuristic.start_offsets[j.index] == 0 for j in jobs):
            # Every job of the window starts now, placed node by node: each s_i is at its
            # lower bound t, so no plan has a lower total slowdown and there is nothing to
            # search (most decisions on a lightly loaded system, e.g. LLNL-Atlas).
            outcome.build_seconds = time.monotonic() - built
            outcome.status, outcome.objective = pb.SOLVE_STATUS_OPTIMAL, heuristic_objective
            return _finish(problem, outcome, jobs, heuristic, heuristic.placements(),
                           reservation, control)
        try:
            formulation = self.formulate(problem, jobs, should_stop, heuristic, reservation)
        except Stopped:
            outcome.build_seconds = time.monotonic() - built
            if control.cancelled():
                return _abandoned(outcome)
            if control.settings.deterministic:
                log.warning("deterministic search cut by the deadline before the model was "
                            "built: decision not reproducible", dispatcher=self.name)
            # Past the deadline before the model was built: the heuristic plan decides.
            outcome.status, outcome.objective = pb.SOLVE_STATUS_HEURISTIC, heuristic_objective
            return _finish(problem, outcome, jobs, heuristic, heuristic.placements(),
                           reservation, control)
        outcome.variables, outcome.constraints = model_size(formulation.model)
        own = formulation.own_list_schedule()
        if own is not None:  # the model's own list schedule replaces the shared one
            heuristic = own
            heuristic_objective = total_slowdown(problem, jobs, own.start_offsets)
        comparable = self.heuristic_in_model or own is not None
        if pinned is not None and heuristic.start_offsets[pinned.index] == 0:
            # The guarded job starts now (the hinted plan does so: the model stays feasible).
            pinned_at = next(k for k, j in enumerate(formulation.schedule.jobs) if j is pinned)
            formulation.model.add(formulation.schedule.now_literals[pinned_at] == 1)
        outcome.build_seconds = time.monotonic() - built
        if control.cancelled():
            return _abandoned(outcome)

        attempt = _attempts(problem, jobs, formulation, heuristic, control)
        policy = run_restart_policy(
            attempt, control.settings, control.deadline, control.cancelled
        )
        outcome.attempts = policy.attempts
        outcome.solve_seconds = policy.solve_seconds
        if control.settings.deterministic and policy.deadline_cut:
            log.warning("deterministic search cut by the deadline: decision not reproducible",
                        dispatcher=self.name, attempts=len(policy.attempts))
        if control.cancelled():
            return _abandoned(outcome)
        if policy.status == pb.SOLVE_STATUS_INFEASIBLE and not comparable:
            # Solver-state awareness: a proof of infeasibility means the jobs wait.
            outcome.status = pb.SOLVE_STATUS_INFEASIBLE
            return outcome
        if policy.status in (pb.SOLVE_STATUS_INFEASIBLE, pb.SOLVE_STATUS_MODEL_INVALID):
            # The heuristic plan is a solution of this model, so the model is wrong: say so
            # (logged and counted under this status) and decide with the heuristic plan.
            log.error("CP model rejected a known solution", dispatcher=self.name,
                      status=pb.SolveStatus.Name(pb.SolveStatus.ValueType(policy.status)))
            chosen, outcome.status = heuristic, policy.status
        elif policy.best is not None and policy.objective is not None and (
            not comparable or policy.objective <= heuristic_objective + 1e-9
        ):
            chosen, outcome.status = policy.best, policy.status
        else:  # the solver found nothing better: decide with the heuristic plan
            chosen, outcome.status = heuristic, pb.SOLVE_STATUS_HEURISTIC
        chosen = left_shift(
            problem, jobs, chosen, reservation, self.exact_allocation_now, control.first_fit
        )
        outcome.objective = total_slowdown(problem, jobs, chosen.start_offsets)
        placements = formulation.allocate(chosen, control.first_fit)
        return _finish(problem, outcome, jobs, chosen, placements, reservation, control)


def _finish(
    problem: Problem,
    outcome: Outcome,
    jobs: list[Job],
    plan: Plan,
    placements: dict[int, list[int]],
    reservation: Reservation | None,
    control: SearchControl,
) -> Outcome:
    """The decision's placements, with the work-conserving starts beyond the window when the
    settings ask for them (time permitting: past the deadline, the plan's own stand)."""
    outcome.placements = placements
    if not control.settings.work_conserving:
        return outcome
    try:
        extended = start_what_fits(
            problem, jobs, plan, placements, reservation, control.first_fit,
            control.should_stop,
        )
    except Stopped:
        return outcome
    added = [i for i in extended if i not in placements]
    if added:
        outcome.placements = extended
        outcome.considered.extend(added)
        started = set(added)
        outcome.skipped = [(i, why) for i, why in outcome.skipped if i not in started]
    return outcome


def _attempts(
    problem: Problem,
    jobs: list[Job],
    formulation: Formulation,
    heuristic: Plan,
    control: SearchControl,
) -> Callable[[float, Plan | None], AttemptResult[Plan]]:
    """One solver attempt for the restart policy: `limit` seconds from its call, everything
    included, started from the best plan so far (the heuristic plan before the first).

    The hints are computed and written only when that plan changes: attempts that found
    nothing leave the model hinted as it was.
    """
    deterministic = control.settings.deterministic
    stall = control.settings.stall_ms / 1000 if control.settings.stall_ms else None
    hinted: list[Plan] = []  # the plan whose hints are in the model

    def extract(values: SolutionValues) -> tuple[Plan, float]:
        plan = formulation.extract(values)
        return plan, total_slowdown(problem, jobs, plan.start_offsets)

    def attempt(limit: float, best_so_far: Plan | None) -> AttemptResult[Plan]:
        # Deterministic: `limit` is deterministic time and only the deadline caps the wall.
        stop_at = control.deadline if deterministic else time.monotonic() + limit
        start_from = best_so_far if best_so_far is not None else heuristic
        hint: Hint | None = None
        if not hinted or hinted[0] is not start_from:
            hint = formulation.hint(start_from)
            hinted[:] = [start_from]
        return solve_attempt(
            formulation.model, stop_at, hint, extract, control.workers, stall, control.cancelled,
            deterministic_limit=limit if deterministic else None,
        )

    return attempt


def _abandoned(outcome: Outcome) -> Outcome:
    """The deadline passed or the caller left before a plan existed: nothing starts."""
    outcome.placements = {}
    outcome.status = pb.SOLVE_STATUS_UNKNOWN
    return outcome
