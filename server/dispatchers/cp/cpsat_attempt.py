"""One CP-SAT attempt that ends at a given time, guarded by a watchdog.

An attempt's time is everything from the moment the restart policy starts it: writing the
hints into the model, CP-SAT loading the model, the search, reading the solution back. So the
attempt gets an end time (`stop_at`), and the solver's own limit is what is left of it once the
hints are in, not the attempt's whole limit. Hints are written straight into the model's hint
message (one bulk write; `CpModel.add_hint` costs 2 µs a variable, 70 ms for PCP'19's 29,000
variables at KIT size), and left as they are when the caller passes none (the same plan as the
previous attempt). The solution is read back from the response in one piece.

CP-SAT may overrun its own limit (presolve ignores it); a watchdog thread calls stop_search()
shortly after the end time, and presolve is off because first solutions come faster without it
on these models. The solver releases the GIL, so the watchdog runs while it searches. The same
watchdog ends the attempt once the search stalls (no better solution for `stall_seconds` after
the last one) or once `cancelled()` says the caller is gone.

A deterministic attempt (`deterministic_limit`) is limited in CP-SAT's deterministic time
instead (`max_deterministic_time`, a count of the work done, not of seconds passed), with one
worker and a fixed random seed, and no stall rule (a stall is measured in wall time): the same
model and hints give the same search and the same solution however busy the machine is. The
end time still caps it (`max_time_in_seconds` and the watchdog); an attempt stopped there
before it proved anything is reported as cut (`AttemptResult.deadline_cut`), since what it
found then depends on the machine's speed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from ortools.sat.python import cp_model

from ...domain.outcome_kinds import AttemptEnd, SolveStatus
from .restart_policy import AttemptResult

S = TypeVar("S")

Hint = Sequence[tuple[cp_model.IntVar, int]]

WATCHDOG_GRACE_SECONDS = 0.02
# How often the watchdog asks `cancelled()` while the solver searches.
CANCEL_POLL_SECONDS = 0.005
# The solver's smallest limit: an attempt whose hints took all its time still looks once.
MIN_SOLVER_SECONDS = 0.001
# CP-SAT's random seed in deterministic attempts (its default, fixed here explicitly).
DETERMINISTIC_SEED = 1
_PROVEN = (cp_model.OPTIMAL, cp_model.INFEASIBLE, cp_model.MODEL_INVALID)

_STATUS = {
    cp_model.OPTIMAL: SolveStatus.OPTIMAL,
    cp_model.FEASIBLE: SolveStatus.FEASIBLE,
    cp_model.INFEASIBLE: SolveStatus.INFEASIBLE,
    cp_model.UNKNOWN: SolveStatus.UNKNOWN,
    cp_model.MODEL_INVALID: SolveStatus.MODEL_INVALID,
}


class SolutionValues:
    """The values of the solver's best solution, copied out once."""

    def __init__(self, solver: cp_model.CpSolver) -> None:
        self._values = list(solver.response_proto.solution)

    def value(self, var: cp_model.IntVar) -> int:
        return int(self._values[var.index])


def set_hints(model: cp_model.CpModel, hint: Hint) -> None:
    """Replace the model's hints by `hint` (positive variables only, as the models use)."""
    model.clear_hints()
    message = model.proto.solution_hint
    message.vars.extend([var.index for var, _ in hint])
    message.values.extend([int(value) for _, value in hint])


class _SolutionClock(cp_model.CpSolverSolutionCallback):
    """Remembers when the last (improving) solution arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.last: float | None = None

    def on_solution_callback(self) -> None:
        self.last = time.monotonic()


def _never() -> bool:
    return False


class _StopReason:
    """Why the watchdog stopped the search (None: it did not; the solver returned by itself)."""

    def __init__(self) -> None:
        self.reason: AttemptEnd | None = None


def _watch(
    solver: cp_model.CpSolver,
    clock: _SolutionClock,
    hard_stop: float,
    stall: float | None,
    cancelled: Callable[[], bool],
    poll: float | None,
    done: threading.Event,
    stopped: _StopReason,
) -> None:
    """Call stop_search() at `hard_stop`, on a stall, or once `cancelled()` (asked every
    `poll` seconds; None: never asked), and record why in `stopped`.

    stop_search() does nothing before solve() has begun (CP-SAT makes the search it stops
    inside solve), so once a reason exists it is repeated every poll until the solver returns:
    a caller who leaves while the model loads still stops the search."""
    while not done.is_set():
        current = time.monotonic()
        if stopped.reason is None:
            if cancelled():
                stopped.reason = AttemptEnd.CALLER_GONE
            elif current >= hard_stop:  # the attempt's end time (its limit, or the deadline)
                stopped.reason = AttemptEnd.LIMIT
            elif stall is not None and clock.last is not None and current - clock.last >= stall:
                stopped.reason = AttemptEnd.STALL
        if stopped.reason is not None:
            solver.stop_search()
            done.wait(poll if poll is not None else CANCEL_POLL_SECONDS)
            continue
        wake = hard_stop - current
        if stall is not None:  # look again when the stall would be reached
            wake = min(wake, stall if clock.last is None else clock.last + stall - current)
        if poll is not None:
            wake = min(wake, poll)
        done.wait(max(wake, 0.001))


def solver_limit(stop_at: float) -> float:
    """The solver's max_time_in_seconds for an attempt that must end at `stop_at`."""
    return max(stop_at - time.monotonic(), MIN_SOLVER_SECONDS)


def solve_attempt(
    model: cp_model.CpModel,
    stop_at: float,
    hint: Hint | None,
    extract: Callable[[SolutionValues], tuple[S, float]],
    workers: int = 1,
    stall_seconds: float | None = None,
    cancelled: Callable[[], bool] | None = None,
    deterministic_limit: float | None = None,
) -> AttemptResult[S]:
    """Solve `model` once, until `stop_at` (time.monotonic()); `extract` turns the solution's
    values into (solution, objective). `hint` None keeps the hints already in the model.

    With `deterministic_limit` (deterministic seconds) the search is reproducible: one worker,
    a fixed seed, no stall rule; `stop_at` then only caps it."""
    if cancelled is not None and cancelled():  # gone before the search began: no search
        return AttemptResult(SolveStatus.UNKNOWN, None, None,
                             ended_by=AttemptEnd.CALLER_GONE)
    if hint is not None:
        set_hints(model, hint)
    deterministic = deterministic_limit is not None
    if deterministic:
        workers, stall_seconds = 1, None
    solver = _solver(stop_at, workers, deterministic_limit)
    clock = _SolutionClock()
    done = threading.Event()
    stopped = _StopReason()
    watchdog = threading.Thread(
        target=_watch,
        args=(
            solver, clock, stop_at + WATCHDOG_GRACE_SECONDS, stall_seconds,
            cancelled or _never, CANCEL_POLL_SECONDS if cancelled is not None else None, done,
            stopped,
        ),
        daemon=True,
    )
    watchdog.start()
    try:
        status = solver.solve(model, clock)
    finally:
        done.set()
        watchdog.join()
    mapped = _STATUS.get(status, SolveStatus.UNKNOWN)
    # Stopped by the wall clock before its deterministic limit, and before any proof. The
    # solver's own account says which limit ended it: CP-SAT's wall-clock limit can fire a few
    # ms before `stop_at` by our clock, while a deterministic limit is reported as reached.
    cut = (deterministic and status not in _PROVEN
           and solver.response_proto.deterministic_time < (deterministic_limit or 0.0))
    ended_by = _ended_by(status, stopped.reason, cut)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        solution, objective = extract(SolutionValues(solver))
        return AttemptResult(mapped, solution, objective, cut, ended_by)
    return AttemptResult(mapped, None, None, cut, ended_by)


def _solver(stop_at: float, workers: int, deterministic_limit: float | None) -> cp_model.CpSolver:
    """A CP-SAT solver for one attempt: until `stop_at`, on `workers` threads, or reproducible
    (one worker, a fixed seed) within `deterministic_limit` deterministic seconds."""
    solver = cp_model.CpSolver()
    params = solver.parameters
    params.max_time_in_seconds = solver_limit(stop_at)
    if deterministic_limit is not None:
        params.max_deterministic_time = deterministic_limit
        params.random_seed = DETERMINISTIC_SEED
    params.num_workers = workers
    params.cp_model_presolve = False
    params.search_branching = cp_model.FIXED_SEARCH
    # No LP relaxation: on these models it cost 5× the time to the first solution, for no
    # better objective (benchmarks/decision_cost/snapshot_decisions.py).
    params.linearization_level = 0
    params.log_search_progress = False
    # SIGINT is the process's: CP-SAT's own handler, swapped in and out by every solve on
    # every thread, aborted a replay's Ctrl-C in C++ (std::bad_function_call, issue #51).
    params.catch_sigint_signal = False
    return solver


def _ended_by(status: cp_model.CpSolverStatus, watchdog: AttemptEnd | None, cut: bool
              ) -> AttemptEnd:
    """Why an attempt ended: a proof, else the caller gone or a stall (seen by
    the watchdog), else its end time: the deadline when that stopped a deterministic attempt
    short of its deterministic limit, its own limit otherwise (the restart policy knows when
    a wall-clock limit was the time left)."""
    if status in _PROVEN:
        return AttemptEnd.PROOF
    if watchdog in (AttemptEnd.CALLER_GONE, AttemptEnd.STALL):
        return watchdog
    return AttemptEnd.DEADLINE if cut else AttemptEnd.LIMIT


def model_size(model: cp_model.CpModel) -> tuple[int, int]:
    proto = model.proto
    return len(proto.variables), len(proto.constraints)
