"""PCP'19 (CP 2019): pure CP with node-level allocation.

Each job i may place units on every node n it could fit on now; c[i][n] counts its units on n,
Σ_n c[i][n] = rn_i (the papers' `alternative` over per-node optional unit intervals, with the
identical units of a job merged into one count per node). One cumulative per node × resource
type holds the running jobs on n and every job's interval [s_i, s_i + d_i) with demand
c[i][n] × req_i,r. The variable count grows with the number of nodes: that is this model's
defining property and the reason PCP'20 exists.

Under the promise book, each node's cumulatives also hold every promise's units on that node:
job j promised P_j with c_j,n units on n holds c_j,n × req_j,r over [P_j, P_j + d_j). So
s_i = t with c[i][n] > 0 is a solution only where no promise needs n's room during the run, and
the model's own list schedule (`node_schedule`) plans around the same blocks.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import ClassVar

from ortools.sat.python import cp_model

from ...domain.free_pool import units_per_node
from ..planning.greedy_schedule import total_slowdown
from ..planning.job_selection import submit_order
from ..planning.node_schedule import node_list_schedule
from ..planning.plan import Plan
from ..planning.problem import Job
from ..planning.protected_room import NodeBlock
from ..planning.stopping import Stopped, stop_if
from ..table_row import TableRow
from .cp_dispatch import CpDispatcher
from .cpsat_attempt import SolutionValues
from .formulation import Formulation, ModelInputs

# (job, its interval [s_i, s_i + d_i), c[i][n]) of every job that may use node n
_OnNode = list[tuple[Job, cp_model.IntervalVar, cp_model.IntVar]]


class Pcp19Formulation(Formulation):
    """The scheduling model plus c[i][n], the units of job i on node n, with one cumulative
    per node and resource type."""

    def add_allocation(self, inputs: ModelInputs) -> None:
        self.count: dict[int, dict[int, cp_model.IntVar]] = {}
        room = inputs.reservation
        self._node_fixed: list[NodeBlock] = room.node_fixed() if room is not None else []
        on_node = self._unit_counts()
        self._node_cumulatives(on_node)
        # Allocation after the starts: each job's counts in node order, largest count first.
        self.model.add_decision_strategy(
            [c for counts in self.count.values() for c in counts.values()],
            cp_model.CHOOSE_FIRST,
            cp_model.SELECT_MAX_VALUE,
        )

    def _unit_counts(self) -> dict[int, _OnNode]:
        """c[i][n] in [0, units of i that fit n] on every node a unit fits now; Σ_n c = rn_i."""
        problem, model = self.problem, self.model
        free, cap = problem.free_now.free, problem.capacity
        on_node: dict[int, _OnNode] = defaultdict(list)
        for job, interval in zip(self.jobs, self.schedule.intervals, strict=True):
            stop_if(self.should_stop, "PCP'19 model")
            counts: dict[int, cp_model.IntVar] = {}
            for n in range(len(cap)):
                if problem.eligible[n] and units_per_node(free[n], job.req) > 0:
                    most = min(job.units, units_per_node(cap[n], job.req))
                    c = model.new_int_var(0, most, f"c_{job.index}_{n}")
                    counts[n] = c
                    on_node[n].append((job, interval, c))
            model.add(sum(counts.values()) == job.units)  # exactly rn_i units
            self.count[job.index] = counts
        return on_node

    def _node_cumulatives(self, on_node: dict[int, _OnNode]) -> None:
        """cumulative per node n and type r: running work on n until its end, the protected
        room's blocks on n (every promise's units over [s_i, s_i + d_i)), and every job's
        interval with demand c[i][n] × req_i,r, within cap[n][r]."""
        problem, model, cap = self.problem, self.model, self.problem.capacity
        fixed: dict[int, list[tuple[int, int, tuple[int, ...]]]] = defaultdict(list)
        for b in problem.blocks:
            fixed[b.node].append((0, b.end, b.amounts))
        for n, start, end, amounts in self._node_fixed:
            fixed[n].append((start, end, amounts))
        for n, placed in on_node.items():
            stop_if(self.should_stop, "PCP'19 model")
            held = [(model.new_fixed_size_interval_var(start, end - start, ""), a)
                    for start, end, a in fixed[n]]
            for r in range(len(problem.resources)):
                if not any(job.req[r] for job, _, _ in placed):
                    continue
                model.add_cumulative(
                    [iv for iv, a in held if a[r]] + [iv for _, iv, _ in placed],
                    [a[r] for _, a in held if a[r]] + [c * job.req[r] for job, _, c in placed],
                    cap[n][r],
                )

    def own_list_schedule(self) -> Plan | None:
        """The node-level list schedule, a solution of this model (None: no time for it)."""
        candidates = {index: list(counts) for index, counts in self.count.items()}
        best: tuple[float, Plan] | None = None
        # Priority order, then submit order: the better plan wins (as for the pooled list
        # schedules, greedy_schedule.best_list_schedule).
        for order in (self.jobs, submit_order(self.jobs)):
            try:
                plan = node_list_schedule(self.problem, order, candidates, self.should_stop,
                                          self._node_fixed)
            except Stopped:
                break
            objective = total_slowdown(self.problem, self.jobs, plan.start_offsets)
            if best is None or objective < best[0] - 1e-9:
                best = objective, plan
        return None if best is None else best[1]

    def hint(self, plan: Plan) -> list[tuple[cp_model.IntVar, int]]:
        hints = self.schedule.start_hints(plan.start_offsets)
        for job in self.schedule.jobs:
            placed = plan.unit_counts.get(job.index)
            if placed is None and plan.start_offsets[job.index] == 0 and (
                job.index in plan.unit_nodes
            ):
                placed = Counter(plan.unit_nodes[job.index])
            if placed is not None:
                hints.extend((c, placed.get(n, 0)) for n, c in self.count[job.index].items())
        return hints

    def extract(self, values: SolutionValues) -> Plan:
        plan = Plan(self.schedule.start_offsets_of(values))
        for job in self.schedule.jobs:
            counts = {n: values.value(c) for n, c in self.count[job.index].items()}
            plan.unit_counts[job.index] = counts
            if plan.start_offsets[job.index] == 0:
                plan.unit_nodes[job.index] = [n for n, k in counts.items() for _ in range(k)]
        return plan


class Pcp19Dispatcher(CpDispatcher):
    name: ClassVar[str] = "pcp19"
    # The tables of README.md and docs/configuration.md (scripts/gen_tables.py).
    table: ClassVar[TableRow] = TableRow(
        summary="CP with node-level allocation (one cumulative per node × resource type)",
        model_size="grows with nodes")
    heuristic_in_model: ClassVar[bool] = False
    protects_head: ClassVar[bool] = False  # the papers' node-level model, unchanged
    formulation: ClassVar[type[Formulation]] = Pcp19Formulation
