"""A CP formulation of the window at t: the scheduling model all three share, plus its own part.

Every formulation (HCP'19, PCP'19, PCP'20) is built from the same `ModelInputs` by the one
constructor here, `Formulation.__init__`:

1. the scheduling model (`cp_schedule`): s_i >= t for each job of the window, now_i <=> s_i = t,
   the objective Σ (s_i - q_i + d_i) / d_i, the pooled cumulative per resource type after t and
   the head's reservation as a block held from its start τ;
   (or, under the promise book, every promise: the room a decision protects,
   `planning.protected_room`);
2. the model's own part, `add_allocation` (none for HCP'19, the unit counts per node for
   PCP'19, the unit positions on the resource lines for PCP'20).

A formulation also turns a plan into solver hints, reads a plan back from a solution, and says
on which nodes the jobs starting at t go: the defaults here are those of a model whose plans
carry their nodes (`Plan.placements`); a model overrides what it does differently.
"""

from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from ..planning.plan import Plan
from ..planning.problem import Job, Problem
from ..planning.protected_room import ProtectedRoom
from ..planning.stopping import StopCheck, never
from .cp_schedule import ScheduleModel, build_schedule_model
from .cpsat_attempt import SolutionValues


@dataclass(frozen=True, slots=True)
class ModelInputs:
    """What a formulation is built from at t."""

    problem: Problem
    jobs: list[Job]  # the window, in priority order (a guarded job that starts now first)
    heuristic: Plan  # the heuristic plan (PCP'20 takes its nodes as candidates)
    # What nothing started now may take: the head's reservation when the model protects it,
    # or every promise the book holds (`planning.protected_room`).
    reservation: ProtectedRoom | None = None
    should_stop: StopCheck = never  # the build raises Stopped once this turns true


class Formulation:
    """The model of `inputs.jobs` at t: the shared scheduling model plus `add_allocation`."""

    # Whether the shared (pooled) list schedule is still a solution once `add_allocation` is
    # in: False where the model's own part constrains the pooled view further (HCP'19's
    # cumulatives per eligibility class), so that its objective does not compare.
    pooled_plans_fit: bool = True

    def __init__(self, inputs: ModelInputs) -> None:
        self.problem, self.jobs = inputs.problem, inputs.jobs
        self.reservation, self.should_stop = inputs.reservation, inputs.should_stop
        # Nothing started now may delay the head (its units are held from τ on), or a promise.
        room = inputs.reservation
        fixed = room.pooled_fixed(inputs.problem) if room is not None else None
        self.schedule: ScheduleModel = build_schedule_model(
            inputs.problem, inputs.jobs, True, fixed
        )
        self.model: cp_model.CpModel = self.schedule.model
        self.add_allocation(inputs)

    def add_allocation(self, inputs: ModelInputs) -> None:
        """The model's own variables and constraints (raises Stopped past `should_stop`)."""

    def own_list_schedule(self) -> Plan | None:
        """A list schedule that is a solution of this very model, where the shared heuristic
        plan is not one (None: the shared one is, or there was no time to finish it)."""
        return None

    def hint(self, plan: Plan) -> list[tuple[cp_model.IntVar, int]]:
        """The solver hints that make `plan` the search's first solution."""
        return self.schedule.start_hints(plan.start_offsets)

    def extract(self, values: SolutionValues) -> Plan:
        """The plan of a solution: every s_i - t, and the nodes of the jobs starting at t."""
        return Plan(self.schedule.start_offsets_of(values))

    def allocate(self, plan: Plan, first_fit: bool) -> dict[int, list[int]]:
        """Job index -> node of each unit, for the jobs `plan` starts at t."""
        return plan.placements()
