"""The CP decision as ordered steps: a profile knob is a step that runs only when its setting
asks for it, a step that ends the decision ends it, and every CP model is built by the one
formulation constructor."""

from __future__ import annotations

import dataclasses
import time

import pytest

from hpcdispatch.server.dispatchers import BY_NAME
from hpcdispatch.server.dispatchers.base import Outcome, SearchControl, SearchSettings
from hpcdispatch.server.dispatchers.cp.cp_dispatch import CpDispatcher
from hpcdispatch.server.dispatchers.cp.decision import Decision, Next
from hpcdispatch.server.dispatchers.cp.decision_steps import DECISION_STEPS, Step
from hpcdispatch.server.dispatchers.cp.formulation import Formulation
from hpcdispatch.server.dispatchers.planning.greedy_schedule import greedy_schedule
from hpcdispatch.server.dispatchers.planning.problem import Problem
from hpcdispatch.server.dispatchers.planning.stopping import never
from hpcdispatch.server.domain.outcome_kinds import SolveStatus
from hpcdispatch.snapshot import Snapshot
from tests.instances import T, node, problem_of, queued

SETTINGS = SearchSettings("test", delta_ms=100, delta_max_ms=800, k=1, window=100)
CP_NAMES = ["hcp19", "pcp19", "pcp20"]


def _busy() -> Problem:
    # 12 jobs on 8 nodes of 8 cores, waiting 100 s: they do not all fit now (searched).
    return problem_of(Snapshot(
        T, tuple(node(i, cores=8) for i in range(8)), (),
        tuple(queued(f"j{i}", 2 + i % 3, 100 + 10 * i, units=1 + i % 3) for i in range(12)),
    ))


def _idle() -> Problem:
    # The same 12 jobs on 80 nodes: every one starts now.
    return problem_of(Snapshot(
        T, tuple(node(i, cores=8) for i in range(80)), (),
        tuple(queued(f"j{i}", 2 + i % 3, 100 + 10 * i, units=1 + i % 3) for i in range(12)),
    ))


def _steps_run(
    name: str, problem: Problem, settings: SearchSettings, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[str], Outcome]:
    """The names of the steps `name`'s decision ran, in order, and its outcome."""
    dispatcher = BY_NAME[name]
    assert isinstance(dispatcher, CpDispatcher)
    ran: list[str] = []

    def recorded(step: Step) -> Step:
        def run(d: Decision) -> Next:
            ran.append(step.name)
            return step.run(d)

        return Step(step.name, run, step.applies)

    monkeypatch.setattr(type(dispatcher), "steps", tuple(recorded(s) for s in DECISION_STEPS))
    outcome = dispatcher.decide(problem, SearchControl(settings, time.monotonic() + 60))
    return ran, outcome


@pytest.mark.parametrize(
    ("knob", "value", "step"),
    [
        ("starvation_wait_s", 1, "guard the oldest job"),
        ("protect_head", True, "reserve for the head"),
        ("more_orders", True, "plan by more orders"),
        ("work_conserving", True, "start what fits around"),
    ],
)
def test_a_knob_is_a_step_that_runs_only_when_its_setting_asks(
    knob: str, value: object, step: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    without, _ = _steps_run("pcp20", _busy(), SETTINGS, monkeypatch)
    with_knob, _ = _steps_run(
        "pcp20", _busy(), dataclasses.replace(SETTINGS, **{knob: value}), monkeypatch
    )
    assert step not in without
    assert step in with_knob


def test_a_searched_decision_runs_the_steps_in_their_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ran, outcome = _steps_run("pcp20", _busy(), SETTINGS, monkeypatch)
    assert ran == [
        "reduce to the window", "open the window", "plan by list schedules",
        "take a plan that starts all now", "build the model", "adopt the model's list schedule",
        "finish the build", "search under the restart policy", "choose the plan", "shift left",
        "allocate nodes", "place",
    ]
    assert outcome.attempts and outcome.placements


@pytest.mark.parametrize("name", ["pcp19", "pcp20"])
def test_a_plan_that_starts_all_now_decides_without_a_model(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran, outcome = _steps_run(name, _idle(), SETTINGS, monkeypatch)
    assert "build the model" not in ran and "search under the restart policy" not in ran
    assert ran[-1] == "place"
    assert outcome.status == SolveStatus.OPTIMAL and len(outcome.placements) == 12


def test_an_empty_window_ends_the_decision(monkeypatch: pytest.MonkeyPatch) -> None:
    # One job wider than the system: nothing fits now, nothing enters the window.
    problem = problem_of(Snapshot(T, (node(0, cores=8),), (), (queued("wide", 16, 100),)))
    ran, outcome = _steps_run("pcp20", problem, SETTINGS, monkeypatch)
    assert ran == ["reduce to the window", "open the window"]
    assert outcome.status == SolveStatus.EMPTY and outcome.placements == {}


@pytest.mark.parametrize("name", CP_NAMES)
def test_every_cp_model_is_built_by_the_one_formulation_constructor(name: str) -> None:
    dispatcher = BY_NAME[name]
    assert isinstance(dispatcher, CpDispatcher)
    # Each dispatcher only names its formulation: `formulate` is not copied per model.
    assert "formulate" not in vars(type(dispatcher))
    assert "__init__" not in vars(dispatcher.formulation)
    problem = _busy()
    heuristic = greedy_schedule(problem, problem.jobs, exact_allocation_now=True)
    formulation = dispatcher.formulate(problem, problem.jobs, never, heuristic, None)
    assert type(formulation) is dispatcher.formulation
    assert isinstance(formulation, Formulation)
    assert formulation.schedule.jobs == problem.jobs
    assert formulation.model is formulation.schedule.model
