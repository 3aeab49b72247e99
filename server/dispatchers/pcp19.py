"""PCP'19 (CP 2019): pure CP with node-level allocation.

Each job i may place units on every node n it could fit on now; c[i][n] counts its units on n,
Σ_n c[i][n] = rn_i (the papers' `alternative` over per-node optional unit intervals, with the
identical units of a job merged into one count per node). One cumulative per node × resource
type holds the running jobs on n and every job's interval [s_i, s_i + d_i) with demand
c[i][n] × req_i,r. The variable count grows with the number of nodes: that is this model's
defining property and the reason PCP'20 exists.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from typing import ClassVar

from ortools.sat.python import cp_model

from hpcdispatch.server.dispatchers.cp_dispatch import BuildBudgetExceeded, CpDispatcher, Solution
from hpcdispatch.server.dispatchers.cp_schedule import build_schedule_model
from hpcdispatch.server.dispatchers.free_pool import units_per_node
from hpcdispatch.server.dispatchers.greedy_schedule import total_slowdown
from hpcdispatch.server.dispatchers.job_selection import submit_order
from hpcdispatch.server.dispatchers.node_schedule import (
    ScheduleBudgetExceeded,
    node_list_schedule,
)
from hpcdispatch.server.dispatchers.problem import Job, Problem
from hpcdispatch.server.dispatchers.reservation import Reservation
from hpcdispatch.v1 import dispatcher_pb2 as pb


class Pcp19Formulation:
    def __init__(self, problem: Problem, jobs: list[Job], deadline: float) -> None:
        self.problem = problem
        self.schedule = build_schedule_model(problem, jobs, pooled=True)
        self.model = model = self.schedule.model
        free, cap = problem.free_now.free, problem.capacity
        self.count: dict[int, dict[int, cp_model.IntVar]] = {}
        on_node: dict[int, list[tuple[Job, cp_model.IntervalVar, cp_model.IntVar]]] = (
            defaultdict(list)
        )
        for job, interval in zip(jobs, self.schedule.intervals, strict=True):
            if time.monotonic() > deadline:
                raise BuildBudgetExceeded("PCP'19 model did not fit in the time budget")
            counts: dict[int, cp_model.IntVar] = {}
            for n in range(len(cap)):
                if problem.eligible[n] and units_per_node(free[n], job.req) > 0:
                    most = min(job.units, units_per_node(cap[n], job.req))
                    c = model.new_int_var(0, most, f"c_{job.index}_{n}")
                    counts[n] = c
                    on_node[n].append((job, interval, c))
            model.add(sum(counts.values()) == job.units)  # exactly rn_i units
            self.count[job.index] = counts
        self.jobs, self.deadline = jobs, deadline
        running: dict[int, list[tuple[int, tuple[int, ...]]]] = defaultdict(list)
        for b in problem.blocks:
            running[b.node].append((b.end, b.amounts))
        for n, placed in on_node.items():
            if time.monotonic() > deadline:
                raise BuildBudgetExceeded("PCP'19 model did not fit in the time budget")
            held = [(model.new_fixed_size_interval_var(0, end, ""), a) for end, a in running[n]]
            for r in range(len(problem.resources)):
                if not any(job.req[r] for job, _, _ in placed):
                    continue
                model.add_cumulative(
                    [iv for iv, a in held if a[r]] + [iv for _, iv, _ in placed],
                    [a[r] for _, a in held if a[r]] + [c * job.req[r] for job, _, c in placed],
                    cap[n][r],
                )
        model.add_decision_strategy(
            [c for counts in self.count.values() for c in counts.values()],
            cp_model.CHOOSE_FIRST,
            cp_model.SELECT_MAX_VALUE,
        )

    def incumbent(self) -> Solution | None:
        """The node-level list schedule: a solution of this model, or None past the deadline."""
        candidates = {index: list(counts) for index, counts in self.count.items()}
        best: tuple[float, dict[int, int], dict[int, dict[int, int]]] | None = None
        # Priority order, then submit order: the better plan is the incumbent (as for the
        # pooled list schedules, greedy_schedule.best_list_schedule).
        for order in (self.jobs, submit_order(self.jobs)):
            try:
                starts, counts = node_list_schedule(self.problem, order, candidates, self.deadline)
            except ScheduleBudgetExceeded:
                break
            objective = total_slowdown(self.problem, self.jobs, starts)
            if best is None or objective < best[0] - 1e-9:
                best = objective, starts, counts
        if best is None:
            return None
        _, starts, counts = best
        nodes = {
            i: [n for n, k in counts[i].items() for _ in range(k)] for i in starts if not starts[i]
        }
        return Solution(starts, nodes, counts)

    def hint(self, solution: Solution) -> list[tuple[cp_model.IntVar, int]]:
        hints = self.schedule.start_hints(solution.starts)
        for job in self.schedule.jobs:
            start = solution.starts[job.index]
            placed = solution.counts.get(job.index)
            if placed is None and start == 0 and job.index in solution.nodes:
                placed = Counter(solution.nodes[job.index])
            if placed is not None:
                hints.extend((c, placed.get(n, 0)) for n, c in self.count[job.index].items())
        return hints

    def extract(self, solver: cp_model.CpSolver) -> Solution:
        solution = Solution(self.schedule.starts_of(solver))
        for job in self.schedule.jobs:
            start = solution.starts[job.index]
            solution.counts[job.index] = {
                n: int(solver.value(c)) for n, c in self.count[job.index].items()
            }
            if start == 0:
                solution.nodes[job.index] = [
                    n for n, c in self.count[job.index].items() for _ in range(solver.value(c))
                ]
        return solution

    def allocate(self, solution: Solution, first_fit: bool) -> dict[int, list[int]]:
        return solution.placed_now()


class Pcp19Dispatcher(CpDispatcher):
    name: ClassVar[str] = "pcp19"
    kind: ClassVar[int] = pb.DISPATCHER_PCP19
    heuristic_in_model: ClassVar[bool] = False
    protects_head: ClassVar[bool] = False  # the papers' node-level model, unchanged

    def formulate(
        self,
        problem: Problem,
        jobs: list[Job],
        deadline: float,
        heuristic: Solution,
        reservation: Reservation | None,
    ) -> Pcp19Formulation:
        return Pcp19Formulation(problem, jobs, deadline)
