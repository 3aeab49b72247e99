"""One CP-SAT attempt under a time limit, guarded by a watchdog.

CP-SAT may overrun its own limit (presolve ignores it); a watchdog thread calls stop_search()
shortly after the limit, and presolve is off because first solutions come faster without it
(DESIGN.md §3). The solver releases the GIL, so the watchdog runs while it searches. The same
watchdog can end the attempt once the search stalls: no better solution for `stall_seconds`
after the last one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from ortools.sat.python import cp_model

from hpcdispatch.server.restart_policy import AttemptResult
from hpcdispatch.v1 import dispatcher_pb2 as pb

S = TypeVar("S")

WATCHDOG_GRACE_SECONDS = 0.02

_STATUS = {
    cp_model.OPTIMAL: pb.SOLVE_STATUS_OPTIMAL,
    cp_model.FEASIBLE: pb.SOLVE_STATUS_FEASIBLE,
    cp_model.INFEASIBLE: pb.SOLVE_STATUS_INFEASIBLE,
    cp_model.UNKNOWN: pb.SOLVE_STATUS_UNKNOWN,
    cp_model.MODEL_INVALID: pb.SOLVE_STATUS_MODEL_INVALID,
}


class _SolutionClock(cp_model.CpSolverSolutionCallback):
    """Remembers when the last (improving) solution arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.last: float | None = None

    def on_solution_callback(self) -> None:
        self.last = time.monotonic()


def _watch(
    solver: cp_model.CpSolver, clock: _SolutionClock, hard_stop: float, stall: float | None,
    done: threading.Event,
) -> None:
    while not done.is_set():
        now = time.monotonic()
        if now >= hard_stop or (
            stall is not None and clock.last is not None and now - clock.last >= stall
        ):
            solver.stop_search()
            return
        wake = hard_stop - now
        if stall is not None:  # look again when the stall would be reached
            wake = min(wake, stall if clock.last is None else clock.last + stall - now)
        done.wait(max(wake, 0.001))


def solve_attempt(
    model: cp_model.CpModel,
    limit_seconds: float,
    hint: list[tuple[cp_model.IntVar, int]],
    extract: Callable[[cp_model.CpSolver], tuple[S, float]],
    workers: int = 1,
    stall_seconds: float | None = None,
) -> AttemptResult[S]:
    """Solve `model` once; `extract` turns the solver's values into (solution, objective)."""
    model.clear_hints()
    for var, value in hint:
        model.add_hint(var, value)
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.max_time_in_seconds = max(limit_seconds, 0.001)
    params.num_workers = workers
    params.cp_model_presolve = False
    params.search_branching = cp_model.FIXED_SEARCH
    # No LP relaxation: on these models it cost 5× the time to the first solution, for no
    # better objective (benchmarks/snapshot_decisions.py).
    params.linearization_level = 0
    params.log_search_progress = False
    clock = _SolutionClock()
    done = threading.Event()
    watchdog = threading.Thread(
        target=_watch,
        args=(solver, clock, time.monotonic() + limit_seconds + WATCHDOG_GRACE_SECONDS,
              stall_seconds, done),
        daemon=True,
    )
    watchdog.start()
    try:
        status = solver.solve(model, clock)
    finally:
        done.set()
        watchdog.join()
    mapped = _STATUS.get(status, pb.SOLVE_STATUS_UNKNOWN)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        solution, objective = extract(solver)
        return AttemptResult(mapped, solution, objective)
    return AttemptResult(mapped, None, None)


def model_size(model: cp_model.CpModel) -> tuple[int, int]:
    proto = model.proto
    return len(proto.variables), len(proto.constraints)
