"""Deadline and cancellation: every stage stops when the decision's caller is gone, and a
solver attempt's time covers everything it does, not only the search."""

from __future__ import annotations

import time
from typing import Any

import pytest
from ortools.sat.python import cp_model

from hpcdispatch.server.dispatchers import BY_NAME
from hpcdispatch.server.dispatchers.base import SearchControl, SearchSettings
from hpcdispatch.server.dispatchers.cp.cpsat_attempt import SolutionValues, set_hints, solve_attempt
from hpcdispatch.server.dispatchers.cp.pcp20 import Pcp20Dispatcher
from hpcdispatch.server.dispatchers.cp.restart_policy import AttemptResult, run_restart_policy
from hpcdispatch.server.dispatchers.planning.plan import Plan
from hpcdispatch.server.dispatchers.planning.problem import Job, Problem
from hpcdispatch.server.dispatchers.planning.reservation import Reservation
from hpcdispatch.server.dispatchers.planning.stopping import StopCheck
from hpcdispatch.server.domain.outcome_kinds import AttemptEnd, SolveStatus
from hpcdispatch.server.domain.profiles import PROFILES
from hpcdispatch.snapshot import Snapshot
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import PRESETS
from tests.instances import T, node, problem_of, queued

PAPERS = PROFILES["papers"][0]  # δ = 1 s: an attempt nobody stops runs for a whole second
FAST_TEST = SearchSettings("test", delta_ms=100, delta_max_ms=800, k=1, window=100)


class Flag:
    """A `cancelled` callable the test flips."""

    def __init__(self, value: bool = False) -> None:
        self.value = value

    def __call__(self) -> bool:
        return self.value


def _kit_problem() -> Problem:
    # 100 queued jobs on a 70 %-busy KIT ForHLR II (1,173 nodes): the model is built and
    # searched (PCP'19: about 29,000 variables).
    return problem_of(synthetic_snapshot(PRESETS["kit-forhlr2"], 100, 0.7, seed=0))


def test_the_restart_policy_starts_no_attempt_once_the_caller_is_gone() -> None:
    cancelled = Flag()
    limits: list[float] = []

    def attempt(limit: float, best_so_far: str | None) -> AttemptResult[str]:
        limits.append(limit)
        cancelled.value = True  # the caller leaves during the first attempt
        return AttemptResult(SolveStatus.UNKNOWN, None, None)

    settings = SearchSettings("t", delta_ms=10, delta_max_ms=160, k=2, window=100)
    result = run_restart_policy(attempt, settings, time.monotonic() + 1e9, cancelled)
    assert len(limits) == 1  # without cancellation: 10, 20, 40, 80, 160 ms
    assert len(result.attempts) == 1


@pytest.mark.parametrize("name", ["fcfs", "easy", "hcp19", "pcp19", "pcp20"])
def test_a_decision_whose_caller_is_gone_places_nothing_and_searches_nothing(name: str) -> None:
    problem = _kit_problem()
    control = SearchControl(PAPERS, time.monotonic() + 60, cancelled=Flag(True))
    outcome = BY_NAME[name].decide(problem, control)
    assert outcome.placements == {}
    assert outcome.attempts == []
    assert outcome.variables == 0  # no model was built (uncancelled PCP'19: ~29,000 variables)


@pytest.mark.parametrize("name", ["pcp19", "pcp20"])
def test_the_watchdog_stops_the_search_when_the_caller_leaves(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller leaves as the first (1 s) attempt's solve begins: the watchdog, which asks
    `cancelled()` every few ms, stops the search and says so, and no other attempt starts.
    Checked by the attempt's own account of why it ended, not by its duration, so a loaded
    machine cannot change the verdict (in the old code nothing stopped it before 1 s)."""
    cancelled = Flag()
    real_solve = cp_model.CpSolver.solve

    def leave_as_the_solve_begins(self: cp_model.CpSolver, *args: Any, **kwargs: Any) -> Any:
        cancelled.value = True  # before CP-SAT's search exists: the stop must still reach it
        return real_solve(self, *args, **kwargs)

    monkeypatch.setattr(cp_model.CpSolver, "solve", leave_as_the_solve_begins)
    control = SearchControl(PAPERS, time.monotonic() + 60, cancelled=cancelled)
    outcome = BY_NAME[name].decide(_kit_problem(), control)
    assert cancelled.value
    assert len(outcome.attempts) == 1  # papers: k = 2, so at least two attempts otherwise
    [attempt] = outcome.attempts
    assert attempt.time_limit_ms == 1000
    assert attempt.ended_by == AttemptEnd.CALLER_GONE
    assert outcome.placements == {}


def test_a_caller_gone_before_the_solve_gets_no_search() -> None:
    """An attempt whose caller has already left returns without solving, and says why."""
    model = cp_model.CpModel()
    model.new_int_var(0, 9, "x")
    solved: list[bool] = []

    def extract(values: Any) -> tuple[str, float]:
        solved.append(True)
        return "solution", 0.0

    result = solve_attempt(model, time.monotonic() + 60, None, extract, cancelled=lambda: True)
    assert result.status == SolveStatus.UNKNOWN and solved == []
    assert result.ended_by == AttemptEnd.CALLER_GONE


class _SlowHints:
    """A PCP'20 formulation whose hints take 60 ms to compute."""

    def __init__(self, inner: Any, calls: list[float]) -> None:
        self.inner, self.model, self.calls = inner, inner.model, calls

    def hint(self, plan: Plan) -> list[tuple[cp_model.IntVar, int]]:
        self.calls.append(time.monotonic())
        time.sleep(0.06)
        hints: list[tuple[cp_model.IntVar, int]] = self.inner.hint(plan)
        return hints

    def own_list_schedule(self) -> Plan | None:
        return None

    def extract(self, values: SolutionValues) -> Plan:
        plan: Plan = self.inner.extract(values)
        return plan

    def allocate(self, plan: Plan, first_fit: bool) -> dict[int, list[int]]:
        placements: dict[int, list[int]] = self.inner.allocate(plan, first_fit)
        return placements


def test_the_solver_gets_what_is_left_of_the_attempt_after_the_hints(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An attempt's limit covers the hints too: the solver's own limit is what is left of it.

    Timed only from below (the hint's sleep is a lower bound), so a loaded machine cannot make
    it fail: with the old code the solver got the whole 100 ms after the 60 ms of hints.
    """
    hint_calls: list[float] = []
    solver_limits: list[float] = []
    real_solve = cp_model.CpSolver.solve

    def recording_solve(self: cp_model.CpSolver, model: cp_model.CpModel, *args: Any) -> Any:
        solver_limits.append(self.parameters.max_time_in_seconds)
        return real_solve(self, model, *args)

    monkeypatch.setattr(cp_model.CpSolver, "solve", recording_solve)

    class SlowPcp20(Pcp20Dispatcher):
        def formulate(
            self, problem: Problem, jobs: list[Job], should_stop: StopCheck, heuristic: Plan,
            reservation: Reservation | None,
        ) -> Any:
            inner = super().formulate(problem, jobs, should_stop, heuristic, reservation)
            return _SlowHints(inner, hint_calls)

    # 12 jobs on 8 nodes: they do not all fit now, so the model is searched.
    snapshot_nodes = tuple(node(i, cores=8) for i in range(8))
    jobs = tuple(queued(f"j{i}", 2 + i % 3, 100 + 10 * i, units=1 + i % 3) for i in range(12))
    problem = problem_of(Snapshot(T, snapshot_nodes, (), jobs))
    outcome = SlowPcp20().decide(problem, SearchControl(FAST_TEST, time.monotonic() + 60))
    assert outcome.attempts and solver_limits
    assert outcome.attempts[0].time_limit_ms == 100
    assert solver_limits[0] <= 0.1 - 0.06 + 1e-6
    # The hints are computed once per plan the attempts start from, not once per attempt.
    assert len(hint_calls) <= len(outcome.attempts)


def test_bulk_hints_equal_add_hint() -> None:
    model = cp_model.CpModel()
    xs = [model.new_int_var(0, 9, f"x{i}") for i in range(5)]
    b = model.new_bool_var("b")
    hint = [(x, i) for i, x in enumerate(xs)] + [(b, 1)]
    for var, value in hint:
        model.add_hint(var, value)
    expected = (list(model.proto.solution_hint.vars), list(model.proto.solution_hint.values))
    set_hints(model, [(xs[0], 7)])  # replaced, not appended
    set_hints(model, hint)
    assert (list(model.proto.solution_hint.vars),
            list(model.proto.solution_hint.values)) == expected
