"""The δ / 2δ / δmax restart policy with solver-state awareness (CP 2019, DESIGN.md §4).

Engine-agnostic: `attempt(limit_seconds, incumbent)` runs one solver attempt and reports its
status and best solution. The policy decides whether to try again with a doubled limit:

1. the first attempt gets δ; the best solution found within the limit is the decision;
2. while no solution has been found, retry with 2δ, 4δ, ... as long as the limit is <= δmax;
3. solver-state awareness: after a proof of infeasibility there is no restart (the jobs wait);
   after a proof of optimality the search stops;
4. once a solution exists, the policy stops when the best objective has stayed the same over
   k consecutive attempts (the attempt that found it counts as the first). With k = 1 the
   first solution is final; with k = 2 one more attempt, from the incumbent, must improve it
   for the search to go on. Attempts that find nothing before any solution exists are
   governed by δmax alone.
The caller's deadline caps everything: an attempt never gets more than the time left.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from hpcdispatch.server.dispatchers.base import AttemptRecord, SearchSettings
from hpcdispatch.v1 import dispatcher_pb2 as pb

S = TypeVar("S")

# Below this much time left, another attempt is not worth starting.
MIN_ATTEMPT_SECONDS = 0.005


@dataclass(slots=True)
class AttemptResult(Generic[S]):
    status: int  # pb.SolveStatus of this attempt
    solution: S | None
    objective: float | None  # total slowdown of `solution`


@dataclass(slots=True)
class PolicyResult(Generic[S]):
    attempts: list[AttemptRecord] = field(default_factory=list)
    best: S | None = None
    objective: float | None = None
    status: int = pb.SOLVE_STATUS_UNKNOWN  # final status
    solve_seconds: float = 0.0


def run_restart_policy(
    attempt: Callable[[float, S | None], AttemptResult[S]],
    settings: SearchSettings,
    deadline: float,
) -> PolicyResult[S]:
    result: PolicyResult[S] = PolicyResult()
    limit_ms = settings.delta_ms
    unchanged = 0  # consecutive attempts over which the best objective stayed the same
    while limit_ms <= settings.delta_max_ms:
        left = deadline - time.monotonic()
        if left < MIN_ATTEMPT_SECONDS:
            break
        limit_s = min(limit_ms / 1000.0, left)
        started = time.monotonic()
        outcome = attempt(limit_s, result.best)
        wall = time.monotonic() - started
        result.solve_seconds += wall
        result.attempts.append(
            AttemptRecord(round(limit_s * 1000), outcome.status, wall, outcome.objective)
        )
        if outcome.status == pb.SOLVE_STATUS_INFEASIBLE:
            result.status = pb.SOLVE_STATUS_INFEASIBLE
            return result
        if outcome.status == pb.SOLVE_STATUS_MODEL_INVALID:
            result.status = pb.SOLVE_STATUS_MODEL_INVALID
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
        if outcome.status == pb.SOLVE_STATUS_OPTIMAL:
            if outcome.solution is not None and not improved and result.best is not None:
                # Proven optimal at the incumbent's value: the incumbent is optimal too.
                result.status = pb.SOLVE_STATUS_OPTIMAL
            return result
        if result.best is not None and unchanged >= settings.k:
            return result
        limit_ms *= 2
    return result
