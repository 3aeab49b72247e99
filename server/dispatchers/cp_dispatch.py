"""What the CP dispatchers share: reductions, incumbent, restart policy, result selection.

A formulation (HCP'19, PCP'19, PCP'20) builds its model for the selected jobs, maps a solution
to solver hints, reads a solution back, and says where the jobs starting at t go. This module
runs the rest the same way for all of them:

1. reductions (DESIGN.md §2): fit-now filter, then the m highest-priority jobs;
2. heuristic list schedules first (priority and submit order; the better is the incumbent),
   so a decision exists whatever the solver does;
3. the δ / 2δ / δmax restart policy, each attempt hinted with the incumbent (skipped when the
   list schedule starts every job now: that is optimal);
4. the better of the solver's best and the heuristic (by total slowdown) is the decision.
"""

from __future__ import annotations

import time
from typing import ClassVar, Protocol

import structlog
from ortools.sat.python import cp_model

from hpcdispatch.server.dispatchers.base import Outcome, SearchControl, SearchSettings
from hpcdispatch.server.dispatchers.cpsat_attempt import model_size, solve_attempt
from hpcdispatch.server.dispatchers.greedy_schedule import (
    GreedySchedule,
    best_list_schedule,
    total_slowdown,
)
from hpcdispatch.server.dispatchers.job_selection import Selection, select_for_model
from hpcdispatch.server.dispatchers.left_shift import left_shift
from hpcdispatch.server.dispatchers.problem import Job, Problem
from hpcdispatch.server.dispatchers.reservation import Reservation, reserve
from hpcdispatch.server.dispatchers.solution import Solution
from hpcdispatch.server.restart_policy import AttemptResult, run_restart_policy
from hpcdispatch.v1 import dispatcher_pb2 as pb

log = structlog.get_logger("hpcdispatch.dispatchers")


class BuildBudgetExceeded(Exception):
    """A formulation gave up building because the decision's time budget ran out."""


class Formulation(Protocol):
    model: cp_model.CpModel

    def hint(self, solution: Solution) -> list[tuple[cp_model.IntVar, int]]: ...

    def incumbent(self) -> Solution | None:
        """A solution of this very model, when the shared list schedule is not one."""
        ...

    def extract(self, solver: cp_model.CpSolver) -> Solution: ...

    def allocate(self, solution: Solution, first_fit: bool) -> dict[int, list[int]]: ...


class CpDispatcher:
    """Base of the CP dispatchers; subclasses say how to build their formulation."""

    name: ClassVar[str]
    kind: ClassVar[int]
    # Whether the heuristic incumbent places jobs on nodes at t (exact-allocation models).
    place_now: ClassVar[bool] = True
    # Whether the list schedule is a solution of this model (same capacity view over time), so
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
        deadline: float,
        heuristic: Solution,
        reservation: Reservation | None,
    ) -> Formulation:
        raise NotImplementedError

    @staticmethod
    def head_reservation(problem: Problem, skipped: list[tuple[int, int]]) -> Reservation | None:
        """EASY's protection for the oldest job that cannot start now, if any."""
        blocked = [problem.jobs[i] for i, why in skipped if why == pb.SKIP_REASON_CANNOT_FIT_NOW]
        if not blocked:
            return None
        head = min(blocked, key=lambda j: (j.submit, j.index))
        return reserve(problem, problem.free_now.copy(), head)

    def incumbent(
        self, problem: Problem, selection: Selection, settings: SearchSettings, first_fit: bool
    ) -> tuple[Reservation | None, GreedySchedule, float]:
        """The head's reservation (if this model protects one), then the better list schedule
        of the considered jobs and its total slowdown."""
        reservation = (
            self.head_reservation(problem, selection.skipped)
            if settings.protect_head and self.protects_head else None
        )
        greedy, objective = best_list_schedule(
            problem, selection.considered, self.place_now, first_fit, reservation
        )
        return reservation, greedy, objective

    def decide(self, problem: Problem, control: SearchControl) -> Outcome:
        selection = select_for_model(problem, control.settings.window, self.max_model_units)
        jobs = selection.considered
        outcome = Outcome(
            starts={},
            status=pb.SOLVE_STATUS_EMPTY,
            considered=[j.index for j in jobs],
            skipped=selection.skipped,
        )
        if not jobs:
            return outcome

        built = time.monotonic()
        reservation, greedy, heuristic_objective = self.incumbent(
            problem, selection, control.settings, control.first_fit
        )
        heuristic = Solution(greedy.starts, greedy.nodes)
        if self.place_now and all(greedy.starts[j.index] == 0 for j in jobs):
            # Every job of the window starts now, placed node by node: each s_i is at its
            # lower bound t, so no plan has a lower total slowdown and there is nothing to
            # search (most decisions on a lightly loaded system, e.g. LLNL-Atlas).
            outcome.build_seconds = time.monotonic() - built
            outcome.status, outcome.objective = pb.SOLVE_STATUS_OPTIMAL, heuristic_objective
            outcome.starts = heuristic.placed_now()
            return outcome
        try:
            formulation = self.formulate(
                problem, jobs, control.deadline, heuristic, reservation
            )
        except BuildBudgetExceeded:
            outcome.build_seconds = time.monotonic() - built
            outcome.status, outcome.objective = pb.SOLVE_STATUS_HEURISTIC, heuristic_objective
            outcome.starts = heuristic.placed_now()
            return outcome
        outcome.variables, outcome.constraints = model_size(formulation.model)
        own = formulation.incumbent()
        if own is not None:  # the model's own list schedule replaces the shared one
            heuristic, heuristic_objective = own, total_slowdown(problem, jobs, own.starts)
        comparable = self.heuristic_in_model or own is not None
        outcome.build_seconds = time.monotonic() - built

        def attempt(limit: float, incumbent: Solution | None) -> AttemptResult[Solution]:
            def extract(solver: cp_model.CpSolver) -> tuple[Solution, float]:
                solution = formulation.extract(solver)
                return solution, total_slowdown(problem, jobs, solution.starts)

            hint = formulation.hint(incumbent if incumbent is not None else heuristic)
            stall = control.settings.stall_ms / 1000 if control.settings.stall_ms else None
            return solve_attempt(formulation.model, limit, hint, extract, control.workers, stall)

        policy = run_restart_policy(attempt, control.settings, control.deadline)
        outcome.attempts = policy.attempts
        outcome.solve_seconds = policy.solve_seconds
        if policy.status == pb.SOLVE_STATUS_INFEASIBLE and not comparable:
            # Solver-state awareness: a proof of infeasibility means the jobs wait.
            outcome.status = pb.SOLVE_STATUS_INFEASIBLE
            return outcome
        if policy.status in (pb.SOLVE_STATUS_INFEASIBLE, pb.SOLVE_STATUS_MODEL_INVALID):
            # The list schedule is a solution of this model, so the model is wrong: say so
            # (logged and counted under this status) and decide with the list schedule.
            log.error("CP model rejected a known solution", dispatcher=self.name,
                      status=pb.SolveStatus.Name(pb.SolveStatus.ValueType(policy.status)))
            chosen, outcome.status = heuristic, policy.status
        elif policy.best is not None and policy.objective is not None and (
            not comparable or policy.objective <= heuristic_objective + 1e-9
        ):
            chosen, outcome.status = policy.best, policy.status
        else:  # the solver found nothing better: decide with the list schedule
            chosen, outcome.status = heuristic, pb.SOLVE_STATUS_HEURISTIC
        chosen = left_shift(
            problem, jobs, chosen, reservation, self.place_now, control.first_fit
        )
        outcome.objective = total_slowdown(problem, jobs, chosen.starts)
        outcome.starts = formulation.allocate(chosen, control.first_fit)
        return outcome
