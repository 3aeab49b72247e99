"""The δ / 2δ / δmax restart policy with solver-state awareness (CP 2019).

Engine-agnostic: `attempt(limit_seconds, best_so_far)` runs one solver attempt, started from
the best solution found so far (None before the first), and reports its status and best
solution. The policy decides whether to try again with a doubled limit:

1. the first attempt gets δ; the best solution found within the limit is the decision;
2. while no solution has been found, retry with 2δ, 4δ, ... as long as the limit is <= δmax;
3. solver-state awareness: after a proof of infeasibility there is no restart (the jobs wait);
   after a proof of optimality the search stops;
4. once a solution exists, the policy stops when the best objective has stayed the same over
   k consecutive attempts (the attempt that found it counts as the first). With k = 1 the
   first solution is final; with k = 2 one more attempt, from the best solution, must improve
   it for the search to go on. Attempts that find nothing before any solution exists are
   governed by δmax alone.

The caller's deadline caps everything: an attempt never gets more than the time left, and no
attempt starts once the caller has gone (`cancelled`).

Limits are wall-clock milliseconds, or, with `SearchSettings.deterministic`, the solver's
deterministic time (CP-SAT's work measure, the same on an idle and on a loaded machine), δ ms
giving δ × DETERMINISTIC_SECONDS_PER_MS deterministic seconds: the same snapshot then gets the
same attempts and the same decision. The deadline
stays wall-clock: a deterministic attempt it cuts short, or a restart it prevents, makes the
decision depend on the machine's speed again (`PolicyResult.deadline_cut`).

The settings it runs under (`domain.search_settings`) and the record of an attempt
(`dispatchers.base.AttemptRecord`) live below it, beside the interface every dispatcher shares.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from ...domain.outcome_kinds import AttemptEnd, SolveStatus
from ...domain.search_settings import SearchSettings
from ..base import AttemptRecord

S = TypeVar("S")

# Deterministic seconds an attempt gets per millisecond of δ. CP-SAT's deterministic second is
# about 5 wall seconds on these models (2-core machine), and a wall-clock attempt of the `fast`
# profile ends on its stall rule (10 ms without improvement) long before δ; without a stall rule
# in deterministic units, this scale keeps a deterministic replay about as fast as a wall-clock
# one: δ = 100 ms gives 5 deterministic ms (about 25 wall ms).
DETERMINISTIC_SECONDS_PER_MS = 0.00005

# Below this much time left, another attempt is not worth starting.
MIN_ATTEMPT_SECONDS = 0.005


@dataclass(slots=True)
class AttemptResult(Generic[S]):
    """What one attempt found."""

    status: SolveStatus  # of this attempt
    solution: S | None
    objective: float | None  # total slowdown of `solution`
    # A deterministic attempt that the wall-clock deadline stopped before its own limit.
    deadline_cut: bool = False
    ended_by: AttemptEnd = AttemptEnd.LIMIT  # why the attempt ended


@dataclass(slots=True)
class PolicyResult(Generic[S]):
    attempts: list[AttemptRecord] = field(default_factory=list)
    best: S | None = None
    objective: float | None = None
    status: SolveStatus = SolveStatus.UNKNOWN  # final status
    solve_seconds: float = 0.0
    # The deadline prevented a restart, or stopped a deterministic attempt before its limit:
    # with deterministic limits, the result is then no longer reproducible.
    deadline_cut: bool = False


def _never() -> bool:
    return False


def run_restart_policy(
    attempt: Callable[[float, S | None], AttemptResult[S]],
    settings: SearchSettings,
    deadline: float,
    cancelled: Callable[[], bool] = _never,
) -> PolicyResult[S]:
    """Run attempts until the policy stops, the deadline (time.monotonic()) passes, or
    `cancelled()` says the caller is gone (checked before every attempt).

    `attempt` gets its limit in seconds: wall-clock ones, capped by the time left, or with
    `settings.deterministic` deterministic ones, and then it must stop at the deadline itself.
    """
    result: PolicyResult[S] = PolicyResult()
    limit_ms = settings.delta_ms
    unchanged = 0  # consecutive attempts over which the best objective stayed the same
    while limit_ms <= settings.delta_max_ms:
        left = deadline - time.monotonic()
        if cancelled():
            break
        if left < MIN_ATTEMPT_SECONDS:
            result.deadline_cut = True
            break
        limit_s = (limit_ms * DETERMINISTIC_SECONDS_PER_MS if settings.deterministic
                   else min(limit_ms / 1000.0, left))
        started = time.monotonic()
        outcome = attempt(limit_s, result.best)
        _record(result, outcome, limit_s, limit_ms, time.monotonic() - started)
        if outcome.status == SolveStatus.INFEASIBLE:
            result.status = SolveStatus.INFEASIBLE
            return result
        if outcome.status == SolveStatus.MODEL_INVALID:
            result.status = SolveStatus.MODEL_INVALID
            return result
        improved = outcome.solution is not None and (
            result.objective is None
            or (outcome.objective is not None and outcome.objective < result.objective - 1e-9)
        )
        if improved:
            result.best, result.objective = outcome.solution, outcome.objective
            result.status = outcome.status
            unchanged = 1
        elif result.best is not None:
            unchanged += 1
        if outcome.status == SolveStatus.OPTIMAL:
            if outcome.solution is not None and not improved and result.best is not None:
                # Proven optimal at the best solution's value: that solution is optimal too.
                result.status = SolveStatus.OPTIMAL
            return result
        if result.best is not None and unchanged >= settings.k:
            return result
        limit_ms *= 2
    return result


def _record(result: PolicyResult[S], outcome: AttemptResult[S], limit_s: float, limit_ms: int,
            wall: float) -> None:
    """Account one attempt in `result`: its time, whether the deadline cut it, its record."""
    result.solve_seconds += wall
    result.deadline_cut |= outcome.deadline_cut
    ended_by = outcome.ended_by
    if ended_by == AttemptEnd.LIMIT and limit_s < limit_ms / 1000.0:
        ended_by = AttemptEnd.DEADLINE  # its wall-clock limit was the time left
    result.attempts.append(
        AttemptRecord(round(limit_s * 1000), outcome.status, wall, outcome.objective,
                      outcome.deadline_cut, ended_by)
    )
