"""The one interface every dispatcher implements: a Problem in, an Outcome out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ..domain.caller_scope import CallerScope
from ..domain.outcome_kinds import AttemptEnd, PromiseMove, SkipReason, SolveStatus
from ..domain.search_control import SearchControl
from ..domain.search_settings import SearchSettings
from .planning.problem import Problem

__all__ = [
    "HEURISTIC",
    "AttemptEnd",
    "AttemptRecord",
    "CallerScope",
    "Dispatcher",
    "Outcome",
    "PromiseMove",
    "PromisesUnplaced",
    "SearchControl",
    "SearchSettings",
    "SkipReason",
    "SolveStatus",
]


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    """One solver attempt as the decision report shows it."""

    time_limit_ms: int  # wall-clock or deterministic milliseconds (SearchSettings.deterministic)
    status: SolveStatus
    wall_seconds: float
    objective: float | None
    deadline_cut: bool = False  # a deterministic attempt stopped by the wall-clock deadline
    ended_by: AttemptEnd = AttemptEnd.UNSPECIFIED  # why it ended


@dataclass(slots=True)
class Outcome:
    """What a dispatcher decided at t and how."""

    placements: dict[int, list[int]]  # job index -> node index of each unit, jobs started at t
    status: SolveStatus
    considered: list[int] = field(default_factory=list)  # job indices in the model
    skipped: list[tuple[int, SkipReason]] = field(default_factory=list)  # (job index, why)
    attempts: list[AttemptRecord] = field(default_factory=list)
    variables: int = 0
    constraints: int = 0
    build_seconds: float = 0.0
    solve_seconds: float = 0.0
    objective: float | None = None
    # Waiting jobs' expected starts, job index -> (s_i - t, whether it is a promise): what
    # `squeue --start` shows a user. Empty where the dispatcher makes no such plan.
    expected_starts: dict[int, tuple[int, bool]] = field(default_factory=dict)
    # Promises that could not be kept: job index -> seconds they moved later, by the least
    # possible, and why (`PromiseMove`; a job missing here moved for an unspecified reason).
    promises_moved: dict[int, int] = field(default_factory=dict)
    promise_move_reasons: dict[int, PromiseMove] = field(default_factory=dict)
    # Beside each promise (expected_starts[i] = (s_i - t, True)): the likely start of the
    # predictor's plan, job index -> seconds after t (<= the promise; an estimate, not a
    # guarantee). Empty where the dispatcher makes no such plan.
    likely_starts: dict[int, int] = field(default_factory=dict)


class Dispatcher(Protocol):
    """What the pipeline calls: a decision on `problem` under `control`. The built-ins also
    carry their registered `name` as a class attribute; a plugin needs only `decide` (its name
    is the one it is registered under)."""

    def decide(self, problem: Problem, control: SearchControl) -> Outcome: ...


class PromisesUnplaced(Exception):
    """A dispatcher that keeps promises could not place the ones held (the deadline came
    first): its fallback cannot answer around them (`CpDispatcher.around_the_promises`)."""


HEURISTIC = SolveStatus.HEURISTIC
