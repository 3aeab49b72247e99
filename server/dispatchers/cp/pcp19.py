"""PCP'19 (CP 2019): pure CP with node-level allocation.

Each job i may place units on every node n it could fit on now; c[i][n] counts its units on n,
Σ_n c[i][n] = rn_i (the papers' `alternative` over per-node optional unit intervals, with the
identical units of a job merged into one count per node). One cumulative per node × resource
type holds the running jobs on n and every job's interval [s_i, s_i + d_i) with demand
c[i][n] × req_i,r. The variable count grows with the number of nodes: that is this model's
defining property and the reason PCP'20 exists.

A site's rules (issue #50, `planning.eligibility`): c[i][n] = 0 off E_i, the nodes job i's
partitions and features allow (no variable there; on E_i a variable on every node a unit fits
when empty, since E_i may hold no room now; a job E_i can never hold has none and waits), and
now_i => c[i][n] = 0 on the nodes of E_i outside its start-now mask (a window it would run
into, started at t, covers them). The model plans later starts node by node too, so they keep
out of the windows as well: for each window w on node n closed to i (`_admitted`),
c[i][n] > 0 => [s_i, s_i + a_i) and [w.from, w.to) do not overlap, a_i = max(d_i,
requested_i) (the longest job i may run); the horizon reaches past the last window
(`cp_schedule.horizon`), so the model stays feasible. The model's own list schedule plans on
E_i; where it starts a job now into a window it is no decision, and the (repaired) shared list
schedule stands in (`decision_steps`).

Under the promise book, each node's cumulatives also hold every promise's units on that node:
job j promised P_j with c_j,n units on n holds c_j,n × req_j,r over [P_j, P_j + d_j). So
s_i = t with c[i][n] > 0 is a solution only where no promise needs n's room during the run, and
the model's own list schedule (`node_schedule`) plans around the same blocks.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import ClassVar

from ortools.sat.python import cp_model

from ...domain.free_pool import NodeMask, units_per_node
from ...domain.occupancy import MAX_MODEL_DURATION
from ..planning.eligibility import Window
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


def _admitted(job: Job, w: Window, mask: NodeMask | None) -> bool:
    """Whether window `w` admits `job`, as far as the problem tells: a window with users,
    accounts or a name (a reservation) that the job, started now, would run into without it
    closing the window's nodes to it (`Eligibility.now`). A window that admits nobody, or
    lies beyond the job's run if it started now, is taken as closed to it (a later start is
    only planned, never dispatched)."""
    if not (w.users or w.accounts or w.name) or not (w.start < job.requested and w.end > 0):
        return False
    return mask is None or not (w.nodes & mask.excluded)


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
        """c[i][n] in [0, units of i that fit n] on every node of E_i a unit fits now;
        Σ_n c = rn_i; with a site's rules, no start now off the start-now mask and no run
        into a window (`_keep_out_of_windows`)."""
        problem, model = self.problem, self.model
        free, cap = problem.free_now.free, problem.capacity
        rules = problem.eligibility
        on_node: dict[int, _OnNode] = defaultdict(list)
        self.start_now_nodes: dict[int, set[int]] = {}
        self.never: set[int] = set()  # jobs E_i can never hold
        for job, interval, now, s in zip(self.jobs, self.schedule.intervals,
                                         self.schedule.now_literals, self.schedule.start_vars,
                                         strict=True):
            stop_if(self.should_stop, "PCP'19 model")
            allowed = rules.allowed(job.index) if rules is not None else None
            mask = rules.now(job.index) if rules is not None else None
            counts: dict[int, cp_model.IntVar] = {}
            # Unrestricted: the nodes a unit fits now (the papers'); restricted: every node of
            # E_i a unit fits when empty (its E_i may not hold it now, and it may start later).
            room = free if allowed is None else cap
            nodes = range(len(cap)) if allowed is None else sorted(allowed)
            for n in nodes:
                if problem.eligible[n] and units_per_node(room[n], job.req) > 0:
                    most = min(job.units, units_per_node(cap[n], job.req))
                    c = model.new_int_var(0, most, f"c_{job.index}_{n}")
                    counts[n] = c
                    on_node[n].append((job, interval, c))
                    if mask is not None and n not in mask:
                        model.add(c == 0).only_enforce_if(now)  # a window it would run into
            if sum(units_per_node(cap[n], job.req) for n in counts) < job.units:
                # E_i can never hold it: no counts, and it does not start now
                for c in counts.values():
                    model.add(c == 0)
                model.add(now == 0)
                self.never.add(job.index)
            else:
                model.add(sum(counts.values()) == job.units)  # exactly rn_i units
            self.count[job.index] = counts
            self.start_now_nodes[job.index] = {n for n in counts if mask is None or n in mask}
            if rules is not None and rules.windows:
                self._keep_out_of_windows(job, s, counts)
        return on_node

    def _keep_out_of_windows(self, job: Job, s: cp_model.IntVar,
                             counts: dict[int, cp_model.IntVar]) -> None:
        """c[i][n] > 0 => job i's run [s_i, s_i + a_i) misses every window on n that does not
        admit it (a_i = max(d_i, requested_i); window ends past the model's range are cut)."""
        model, rules = self.model, self.problem.eligibility
        assert rules is not None
        run, mask = job.at_most, rules.now(job.index)
        for w in rules.windows:
            if w.end <= 0 or _admitted(job, w, mask):
                continue
            end = min(w.end, MAX_MODEL_DURATION)
            for n in w.nodes.intersection(counts):
                uses = model.new_bool_var(f"u_{job.index}_{n}")
                model.add(counts[n] >= 1).only_enforce_if(uses)
                model.add(counts[n] == 0).only_enforce_if(~uses)
                if w.start <= 0:  # under way at t: after its end only
                    model.add(s >= end).only_enforce_if(uses)
                    continue
                before = model.new_bool_var(f"b_{job.index}_{n}")
                model.add(s + run <= w.start).only_enforce_if([uses, before])
                model.add(s >= end).only_enforce_if([uses, ~before])

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
        if self.never:
            return None  # the node-level list schedule places every job somewhere
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
        if best is None or self._breaks_windows(best[1]):
            return None
        return best[1]

    def _breaks_windows(self, plan: Plan) -> bool:
        """Whether `plan` starts a job now on a node of E_i a window it would run into covers
        (the list schedule knows E_i, not the windows): it is then no decision."""
        return any(n not in self.start_now_nodes[i] for i, nodes in plan.placements().items()
                   for n in nodes)

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
