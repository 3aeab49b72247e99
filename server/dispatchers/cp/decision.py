"""The state one CP decision's steps share (`decision_steps`), and how a step ends it.

Each step reads what earlier steps left here and adds its own part: the window, the guarded
job, the head's reservation, the heuristic plan, the model, the restart policy's result, the
chosen plan and its placements; the `Outcome` is filled in as they go. The dispatcher they
serve is seen through `DecidingDispatcher`, what the steps ask of it (`cp_dispatch.CpDispatcher`
is one), so that this module does not import `cp_dispatch`, which imports it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from ...domain.free_pool import FreePool
from ...domain.outcome_kinds import SolveStatus
from ..base import Outcome, SearchControl, SearchSettings
from ..planning.job_selection import Selection
from ..planning.plan import Plan
from ..planning.problem import Job, Problem
from ..planning.promise_room import PromiseRoom
from ..planning.promises import PromiseBook, PromisePlan, Recalled
from ..planning.protected_room import ProtectedRoom
from ..planning.reservation import Reservation
from ..planning.starvation_guard import Guarded
from ..planning.stopping import StopCheck
from .formulation import Formulation
from .restart_policy import PolicyResult


class DecidingDispatcher(Protocol):
    """The dispatcher as a decision's steps see it: what its model can do, and how it builds
    the model and the head's reservation (`cp_dispatch.CpDispatcher`)."""

    @property
    def name(self) -> str: ...

    @property
    def exact_allocation_now(self) -> bool: ...

    @property
    def heuristic_in_model(self) -> bool: ...

    @property
    def protects_head(self) -> bool: ...

    @property
    def max_model_units(self) -> int | None: ...

    @property
    def promises(self) -> PromiseBook: ...

    def formulate(
        self,
        problem: Problem,
        jobs: list[Job],
        should_stop: StopCheck,
        heuristic: Plan,
        reservation: ProtectedRoom | None,
    ) -> Formulation: ...

    def head_reservation(
        self,
        problem: Problem,
        selection: Selection,
        settings: SearchSettings,
        should_stop: StopCheck,
        guarded: Guarded | None,
    ) -> Reservation | None: ...


class Next(Enum):
    """What follows a step: the next step that applies, or the end of the decision."""

    GO_ON = "go on"
    DONE = "done"


@dataclass(slots=True)
class PromiseState:
    """The promise book's part of a decision (`promise_steps`): the problem as the snapshot
    gave it, what the book recalled for it, the jobs that never fit, and the promises once
    kept."""

    problem: Problem
    recalled: Recalled
    never: set[int]
    plan: PromisePlan | None = None


class Abandoned(Exception):
    """The caller left, or the deadline passed before any plan existed: nothing starts (under
    the promise book, once the promises are placed: EASY around them, `promise_fallback`)."""


@dataclass(slots=True)
class Decision:
    """One decision at t of `dispatcher` on `problem`, as its steps have taken it so far."""

    dispatcher: DecidingDispatcher
    problem: Problem
    control: SearchControl
    outcome: Outcome = field(
        default_factory=lambda: Outcome(placements={}, status=SolveStatus.EMPTY)
    )
    selection: Selection = field(default_factory=Selection)
    guarded: Guarded | None = None  # the starvation guard's job, if any
    # With `easy_head`: the oldest jobs that fit, started first (job index -> unit nodes);
    # `problem` is then the problem they leave.
    started_first: dict[int, list[int]] = field(default_factory=dict)
    jobs: list[Job] = field(default_factory=list)  # the window, in priority order
    # What nothing started now may take: the head's reservation, or the promises.
    reservation: ProtectedRoom | None = None
    promised: PromiseState | None = None  # under the promise book (`promise_after_s` >= 0)
    # The promise room and what is free now once the starts checked against it are taken
    # (`keep_every_promises_room`), with those starts: what the steps after it start around.
    after_starts: tuple[PromiseRoom, FreePool, frozenset[int]] | None = None
    heuristic: Plan | None = None  # the best list schedule so far
    heuristic_objective: float = 0.0  # its total slowdown
    formulation: Formulation | None = None
    # Whether the heuristic plan is a solution of the model: its objective then compares with
    # the solver's (`CpDispatcher.heuristic_in_model`, or the model's own list schedule).
    comparable: bool = True
    # Whether the heuristic plan starts every job now only where its site rules allow
    # (`decision_steps.hold_the_heuristic_plan_to_the_rules`); if not, it is no solution of the
    # model, whose starts now do.
    within_rules: bool = True
    policy: PolicyResult[Plan] | None = None  # what the restart policy found
    plan: Plan | None = None  # the decision's plan, once chosen
    placements: dict[int, list[int]] | None = None  # its starts at t, node by node
    _build_started: float | None = None  # time.monotonic() when building began

    @property
    def settings(self) -> SearchSettings:
        return self.control.settings

    @property
    def pinned(self) -> Job | None:
        """The guarded job when it fits now: it must start now."""
        if self.guarded is not None and self.guarded.fits_now:
            return self.guarded.job
        return None

    @property
    def decided(self) -> bool:
        return self.placements is not None

    def promises_placed(self) -> bool:
        """Whether the book's first step placed the promises (`promise_steps`)."""
        return self.promised is not None and self.promised.plan is not None

    def decide_with(self, plan: Plan, placements: dict[int, list[int]]) -> None:
        self.plan, self.placements = plan, placements

    def start_build_clock(self) -> None:
        self._build_started = time.monotonic()

    def stop_build_clock(self) -> None:
        """Record the time since building began in the outcome (once)."""
        if self._build_started is not None:
            self.outcome.build_seconds = time.monotonic() - self._build_started
            self._build_started = None

    def abandon(self) -> Outcome:
        """The outcome of an abandoned decision: no placements (nobody will read it)."""
        self.stop_build_clock()
        self.outcome.placements = {}
        self.outcome.status = SolveStatus.UNKNOWN
        return self.outcome

    def with_started_first(self) -> Outcome:
        """The outcome, with the oldest jobs started first (`easy_head`) among its starts."""
        if self.started_first:
            outcome = self.outcome
            outcome.placements = {**self.started_first, **outcome.placements}
            outcome.considered = [*self.started_first, *outcome.considered]
            if outcome.status == SolveStatus.EMPTY:
                outcome.status = SolveStatus.HEURISTIC
        return self.outcome
