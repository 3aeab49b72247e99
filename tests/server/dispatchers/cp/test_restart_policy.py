"""The δ / 2δ / δmax restart policy against scripted solver attempts."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from hpcdispatch.server.dispatchers.base import SearchSettings
from hpcdispatch.server.dispatchers.cp import restart_policy
from hpcdispatch.server.dispatchers.cp.restart_policy import AttemptResult, run_restart_policy
from hpcdispatch.server.domain.outcome_kinds import AttemptEnd, SolveStatus

OPT, FEAS, INF, UNK = (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE,
                       SolveStatus.INFEASIBLE, SolveStatus.UNKNOWN)


def scripted(
    results: list[tuple[int, float | None]],
) -> tuple[Callable[[float, str | None], AttemptResult[str]], list[float]]:
    limits: list[float] = []

    def attempt(limit: float, best_so_far: str | None) -> AttemptResult[str]:
        status, objective = results[len(limits)]
        limits.append(limit)
        solution = None if objective is None else f"sol{len(limits)}"
        return AttemptResult(status, solution, objective)

    return attempt, limits


def settings(delta: int = 10, delta_max: int = 160, k: int = 2) -> SearchSettings:
    return SearchSettings("t", delta_ms=delta, delta_max_ms=delta_max, k=k, window=100)


FAR = 1e9  # a deadline that never binds (monotonic seconds)


def test_limits_double_while_nothing_is_found_up_to_delta_max() -> None:
    attempt, limits = scripted([(UNK, None)] * 10)
    result = run_restart_policy(attempt, settings(10, 160), time.monotonic() + FAR)
    assert [round(x * 1000) for x in limits] == [10, 20, 40, 80, 160]
    assert result.best is None and result.status == UNK
    assert [a.time_limit_ms for a in result.attempts] == [10, 20, 40, 80, 160]


def test_no_restart_after_a_proof_of_infeasibility() -> None:
    attempt, limits = scripted([(UNK, None), (INF, None), (FEAS, 1.0)])
    result = run_restart_policy(attempt, settings(), time.monotonic() + FAR)
    assert len(limits) == 2 and result.status == INF and result.best is None


def test_stop_on_proven_optimality() -> None:
    attempt, limits = scripted([(UNK, None), (OPT, 5.0), (FEAS, 1.0)])
    result = run_restart_policy(attempt, settings(), time.monotonic() + FAR)
    assert len(limits) == 2 and result.status == OPT and result.objective == 5.0


@pytest.mark.parametrize(
    ("k", "script", "attempts", "best"),
    [
        (1, [(FEAS, 9.0), (FEAS, 5.0)], 1, 9.0),  # k = 1: the first solution is final
        (2, [(FEAS, 9.0), (FEAS, 9.0), (FEAS, 1.0)], 2, 9.0),  # unchanged over 2 attempts
        (2, [(FEAS, 9.0), (FEAS, 7.0), (FEAS, 7.0), (FEAS, 1.0)], 3, 7.0),
        (3, [(FEAS, 9.0), (UNK, None), (FEAS, 9.5), (FEAS, 1.0)], 3, 9.0),
    ],
)
def test_stop_when_the_objective_is_unchanged_over_k_attempts(
    k: int, script: list[tuple[int, float | None]], attempts: int, best: float
) -> None:
    attempt, limits = scripted(script + [(FEAS, 0.5)] * 5)
    result = run_restart_policy(attempt, settings(k=k, delta_max=10_000), time.monotonic() + FAR)
    assert len(limits) == attempts
    assert result.objective == best


class FakeClock:
    """time.monotonic() for the policy: time passes only when an attempt says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


def test_the_deadline_caps_every_attempt_and_the_whole_policy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock()
    monkeypatch.setattr(restart_policy, "time", clock)
    given: list[float] = []

    def attempt(limit: float, best_so_far: str | None) -> AttemptResult[str]:
        given.append(limit)
        clock.now += limit  # each attempt uses all of its limit
        return AttemptResult(UNK, None, None)

    result = run_restart_policy(attempt, settings(delta=100, delta_max=16_000), 0.25)
    ends = [a.ended_by for a in result.attempts]
    # δ = 100 ms, then 2δ capped by the 150 ms left; then no time left for a third.
    assert given == pytest.approx([0.1, 0.15])
    assert ends == [AttemptEnd.LIMIT, AttemptEnd.DEADLINE]
    assert result.deadline_cut


