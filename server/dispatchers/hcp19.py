"""HCP'19 (CP 2019): CP scheduling on pooled capacity, then best-fit allocation.

The model sees one cumulative per resource type over the whole system; pooling hides
fragmentation, so a job the model starts at t may not fit on any node and then waits.
"""

from __future__ import annotations

from typing import ClassVar

from ortools.sat.python import cp_model

from hpcdispatch.server.dispatchers.cp_dispatch import CpDispatcher, Solution
from hpcdispatch.server.dispatchers.cp_schedule import ScheduleModel, build_schedule_model
from hpcdispatch.server.dispatchers.problem import Job, Problem
from hpcdispatch.v1 import dispatcher_pb2 as pb


class Hcp19Formulation:
    def __init__(self, problem: Problem, jobs: list[Job]) -> None:
        self.problem = problem
        self.schedule: ScheduleModel = build_schedule_model(problem, jobs, pooled=True)
        self.model = self.schedule.model

    def hint(self, solution: Solution) -> list[tuple[cp_model.IntVar, int]]:
        return [
            (s, solution.starts[j.index])
            for j, s in zip(self.schedule.jobs, self.schedule.starts, strict=True)
        ]

    def extract(self, solver: cp_model.CpSolver) -> Solution:
        return Solution(
            {
                j.index: int(solver.value(s))
                for j, s in zip(self.schedule.jobs, self.schedule.starts, strict=True)
            }
        )

    def allocate(self, solution: Solution, first_fit: bool) -> dict[int, list[int]]:
        """Best fit, in priority order, for the jobs the schedule starts at t."""
        pool = self.problem.free_now.copy()
        starts: dict[int, list[int]] = {}
        for job in self.schedule.jobs:
            if solution.starts[job.index] == 0:
                nodes = pool.place(job.req, job.units, first_fit)
                if nodes is not None:
                    starts[job.index] = nodes
        return starts


class Hcp19Dispatcher(CpDispatcher):
    name: ClassVar[str] = "hcp19"
    kind: ClassVar[int] = pb.DISPATCHER_HCP19
    place_now: ClassVar[bool] = False

    def formulate(
        self, problem: Problem, jobs: list[Job], deadline: float, heuristic: Solution
    ) -> Hcp19Formulation:
        return Hcp19Formulation(problem, jobs)
