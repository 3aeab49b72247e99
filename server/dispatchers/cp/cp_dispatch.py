"""What the CP dispatchers share: one formulation constructor and one decision, run as steps.

A dispatcher (HCP'19, PCP'19, PCP'20) says which `Formulation` it builds and what its model can
do (`exact_allocation_now`, `heuristic_in_model`, `protects_head`, `max_model_units`); the
decision is the same ordered list of steps for all of them (`decision_steps`): the papers'
reductions, the starvation guard, the head reservation, the heuristic plan, the model, the
δ / 2δ / δmax restart policy, the chosen plan, the work-conserving pass. Each step says from
the settings whether it applies, so a new profile knob adds a step, not a branch of `decide`.
"""

from __future__ import annotations

from typing import ClassVar

from ...domain.outcome_kinds import SkipReason
from ..base import Outcome, SearchControl, SearchSettings
from ..planning.greedy_schedule import best_list_schedule
from ..planning.job_orders import by_priority
from ..planning.job_selection import Selection
from ..planning.list_orders import best_of_orders
from ..planning.plan import Plan
from ..planning.problem import Job, Problem
from ..planning.promises import PromiseBook
from ..planning.protected_room import ProtectedRoom
from ..planning.reservation import Reservation, reserve
from ..planning.starvation_guard import Guarded
from ..planning.stopping import StopCheck, never
from .decision import Abandoned, Decision, Next
from .decision_steps import DECISION_STEPS, Step
from .formulation import Formulation, ModelInputs
from .promise_fallback import after_the_cut, around_the_promises


class CpDispatcher:
    """Base of the CP dispatchers; subclasses say which formulation they build."""

    name: ClassVar[str]
    # The model of the window at t (`formulation`): built by `formulate`, the same for all.
    formulation: ClassVar[type[Formulation]]
    # Whether the heuristic plan places jobs on nodes at t (exact-allocation models).
    exact_allocation_now: ClassVar[bool] = True
    # Whether the heuristic plan is a solution of this model (same capacity view over time), so
    # that its objective compares with the solver's. PCP'19 models the future node by node,
    # where the pooled list schedule is optimistic: there any solver solution wins.
    heuristic_in_model: ClassVar[bool] = True
    # Whether the model can protect a head job's reservation (SearchSettings.protect_head).
    protects_head: ClassVar[bool] = True
    # Largest Σ rn_i in one model, for models with variables per unit (None: no limit).
    max_model_units: ClassVar[int | None] = None
    # The decision, step by step (`decision_steps`).
    steps: ClassVar[tuple[Step, ...]] = DECISION_STEPS

    def __init__(self) -> None:
        # The promises held between decisions (promise book profiles), per caller scope and
        # node list (planning/caller_scope.py).
        self.promises = PromiseBook()

    def decide(self, problem: Problem, control: SearchControl) -> Outcome:
        decision = Decision(self, problem, control)
        done = False
        try:
            for step in self.steps:
                if (not done or step.closing) and step.applies(decision):
                    done = step.run(decision) is Next.DONE or done
        except Abandoned:
            if decision.promises_placed() and not control.cancelled():
                return after_the_cut(decision)  # EASY around the promises, never nothing
            return decision.abandon()
        return decision.with_started_first()

    def around_the_promises(self, problem: Problem, control: SearchControl) -> Outcome | None:
        """The pipeline's fallback for a decision of this dispatcher that failed or started
        nothing: EASY's decision around the promises held (`promise_fallback`), status
        FALLBACK; None without the promise book (no promise to keep: plain EASY is the
        fallback). Raises PromisesUnplaced where the held promises could not be placed."""
        if control.settings.promise_after_s < 0:
            return None
        return around_the_promises(Decision(self, problem, control))

    def formulate(
        self,
        problem: Problem,
        jobs: list[Job],
        should_stop: StopCheck,
        heuristic: Plan,
        reservation: ProtectedRoom | None,
    ) -> Formulation:
        """Build the model; raises Stopped when `should_stop()` turns true meanwhile."""
        return self.formulation(ModelInputs(problem, jobs, heuristic, reservation, should_stop))

    def head_reservation(
        self,
        problem: Problem,
        selection: Selection,
        settings: SearchSettings,
        should_stop: StopCheck = never,
        guarded: Guarded | None = None,
    ) -> Reservation | None:
        """EASY's protection for the first job in priority order (`by_priority`) that cannot
        start now, when the settings ask for it (`protect_head`, `easy_head`) and this model
        can hold it; with a guarded job
        (`starvation_guard`), for that job when it cannot start now, and for none when it
        starts now."""
        if not self.protects_head:
            return None
        if guarded is not None:
            if guarded.fits_now:
                return None
            return reserve(problem, problem.free_now.copy(), guarded.job, should_stop=should_stop)
        if not (settings.protect_head or settings.easy_head):
            return None
        blocked = {
            i for i, why in selection.skipped if why == SkipReason.CANNOT_FIT_NOW
        }
        if not blocked:
            return None
        # The first blocked job in the workload manager's queue order (`by_priority`: higher
        # priority first, submit order within equal priority), as EASY's head.
        head = next(j for j in by_priority(problem) if j.index in blocked)
        return reserve(problem, problem.free_now.copy(), head, should_stop=should_stop)

    def heuristic_plan(
        self,
        problem: Problem,
        jobs: list[Job],
        reservation: ProtectedRoom | None,
        first_fit: bool,
        should_stop: StopCheck = never,
        more_orders: bool = False,
        pinned: Job | None = None,
    ) -> tuple[Plan, float]:
        """The best list schedule of `jobs` and its total slowdown: priority and submit order,
        and with `more_orders` the SJF, F1 and WFP3 orders too (`pinned` first in each), as
        the decision's heuristic-plan steps make it."""
        best = best_list_schedule(
            problem, jobs, self.exact_allocation_now, first_fit, reservation, should_stop
        )
        if more_orders:
            best = best_of_orders(
                problem, jobs, best, self.exact_allocation_now, first_fit, reservation,
                pinned, should_stop,
            )
        return best
