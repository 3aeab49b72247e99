"""HCP'19 (CP 2019): CP scheduling on pooled capacity, then best-fit allocation.

The model sees one cumulative per resource type over the whole system; pooling hides
fragmentation, so a job the model starts at t may not fit on any node and then waits.
"""

from __future__ import annotations

from typing import ClassVar

from ortools.sat.python import cp_model

from hpcdispatch.v1 import dispatcher_pb2 as pb

from ..planning.plan import Plan
from ..planning.problem import Job, Problem
from ..planning.reservation import Reservation, place_around_reservation
from ..planning.stopping import StopCheck
from .cp_dispatch import CpDispatcher
from .cp_schedule import ScheduleModel, build_schedule_model
from .cpsat_attempt import SolutionValues


class Hcp19Formulation:
    def __init__(
        self, problem: Problem, jobs: list[Job], reservation: Reservation | None
    ) -> None:
        self.problem, self.reservation = problem, reservation
        blocks = (reservation.block(),) if reservation is not None else ()
        self.schedule: ScheduleModel = build_schedule_model(problem, jobs, True, blocks)
        self.model = self.schedule.model

    def own_list_schedule(self) -> Plan | None:
        return None  # the shared heuristic plan is a solution of this model

    def hint(self, plan: Plan) -> list[tuple[cp_model.IntVar, int]]:
        return self.schedule.start_hints(plan.start_offsets)

    def extract(self, values: SolutionValues) -> Plan:
        return Plan(self.schedule.start_offsets_of(values))

    def allocate(self, plan: Plan, first_fit: bool) -> dict[int, list[int]]:
        """Best fit, in priority order, for the jobs the schedule starts at t."""
        pool = self.problem.free_now.copy()
        reservation = self.reservation.copy() if self.reservation is not None else None
        placements: dict[int, list[int]] = {}
        for job in self.schedule.jobs:
            if plan.start_offsets[job.index] == 0:
                nodes = place_around_reservation(pool, reservation, job, first_fit)
                if nodes is not None:
                    placements[job.index] = nodes
        return placements


class Hcp19Dispatcher(CpDispatcher):
    name: ClassVar[str] = "hcp19"
    kind: ClassVar[int] = pb.DISPATCHER_HCP19
    exact_allocation_now: ClassVar[bool] = False

    def formulate(
        self,
        problem: Problem,
        jobs: list[Job],
        should_stop: StopCheck,
        heuristic: Plan,
        reservation: Reservation | None,
    ) -> Hcp19Formulation:
        return Hcp19Formulation(problem, jobs, reservation)
