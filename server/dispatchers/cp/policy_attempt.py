"""One solver attempt of the δ / 2δ / δmax restart policy on a formulation, hinted with the best
plan so far."""

from __future__ import annotations

import time
from collections.abc import Callable

from ..base import SearchControl
from ..planning.plan import Plan
from ..planning.problem import Job, Problem
from .cp_schedule import weighted_slowdown
from .cpsat_attempt import Hint, SolutionValues, solve_attempt
from .formulation import Formulation
from .restart_policy import AttemptResult


def policy_attempt(
    problem: Problem,
    jobs: list[Job],
    formulation: Formulation,
    heuristic: Plan,
    control: SearchControl,
) -> Callable[[float, Plan | None], AttemptResult[Plan]]:
    """One solver attempt for the restart policy: `limit` seconds from its call, everything
    included, started from the best plan so far (the heuristic plan before the first). A
    solution's objective is the model's, Σ w_i slowdown_i (`cp_schedule.weighted_slowdown`).

    The hints are computed and written only when that plan changes: attempts that found
    nothing leave the model hinted as it was.
    """
    deterministic = control.settings.deterministic
    stall = control.settings.stall_ms / 1000 if control.settings.stall_ms else None
    hinted: list[Plan] = []  # the plan whose hints are in the model

    def extract(values: SolutionValues) -> tuple[Plan, float]:
        plan = formulation.extract(values)
        return plan, weighted_slowdown(problem, jobs, plan.start_offsets)

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
