"""PCP'20 (Galleguillos, Kiziltan, Soto 2020): pure CP, variables independent of node count.

Allocation model. For each resource type r, all units of r in the system lie on one line, node
after node (nodes of identical capacity next to each other). Unit j of job i gets a position
y[i][r][j]; the box [y, y + req_i,r) on line r must not overlap another box of r (diffn). The
variables are |Q| starts plus Σ rn_i × |R_i| positions, whatever the number of nodes.

Formulation on CP-SAT. Only the jobs that start at t are dispatched, and at t every running job
still holds its resources; so on each node the running work is packed at the left of the node's
segment and the free part is the right end. A unit that starts now must sit inside one node's
free part: that is the domain of its y (a union of intervals, one per node it fits on), and the
boxes of units starting now may not overlap (NoOverlap per line, optional on now_i). Units of one
multi-resource job are kept on one node by the linear map y_r = base_g,r + cap_g,r × k + o_r
inside a group g of identical nodes (no element constraint). Capacity after t is modelled on the
pooled line (the cumulative of the scheduling model): jobs that do not start now are only
re-planned, never dispatched, before the next dispatching time.

A site's rules (issue #50, `planning.eligibility`). Job i may use the nodes E_i its partitions
and features allow, and may start at t only on those of them that no unavailability window it
would run into covers (the window overlaps [t, t + requested_i) and does not admit i): its
start-now mask. The domain of each y[i][r][k] is the union of the free parts of the mask's
nodes only, so a unit starting now lies in a segment of an eligible node out of every window
(a job whose mask holds no free room gets now_i = 0). The model places only the starts at t;
the later starts are planned on the pooled line of the whole system, as before: neither E_i
nor the windows shape them (they are planned again, node by node, when they start).

Under the promise book, the pooled cumulatives hold every promise as a fixed block (job j
promised P_j: rn_j × req_j,r over [P_j, P_j + d_j)), and a unit of job i may start now only in
the part of a node's segment that stays free for its whole run once every promise's units are
taken: y[i][r][k] in [end_n - f_n,r(d_i), end_n - req_i,r], f_n,r(d_i) the least free amount of
r on n over [t, t + d_i) (`promise_room.PromiseRoom.pool_for`). The boxes of the jobs started
now do not overlap at t and each sits at the right end of its node's segment, within what the
promises leave during its run: so together they take no promise's room.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import numpy.typing as npt
from ortools.sat.python import cp_model

from ...domain.free_pool import FreePool, NodeMask, units_per_node
from ..planning.plan import Plan
from ..planning.problem import Job, Problem
from ..planning.stopping import stop_if
from ..table_row import TableRow
from .cp_dispatch import CpDispatcher
from .cpsat_attempt import SolutionValues
from .formulation import Formulation, ModelInputs


class ResourceLines:
    """map_r: positions of every node's units on each resource line, grouped by capacity."""

    def __init__(self, problem: Problem) -> None:
        groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
        for n, cap in enumerate(problem.capacity):
            groups[cap].append(n)
        self.groups = list(groups.values())  # node indices of each group, in line order
        self.group_of: list[int] = [0] * len(problem.capacity)
        self.rank: list[int] = [0] * len(problem.capacity)  # k: index inside its group
        order: list[int] = []
        for g, nodes in enumerate(self.groups):
            for k, n in enumerate(nodes):
                self.group_of[n], self.rank[n] = g, k
            order.extend(nodes)
        n_res = len(problem.resources)
        self.base: list[list[int]] = [[0] * len(order) for _ in range(n_res)]
        self.group_base: list[list[int]] = [[0] * len(self.groups) for _ in range(n_res)]
        self.line_starts: list[list[int]] = []  # per r: position of each node, line order
        self.order = order
        for r in range(n_res):
            pos, line = 0, []
            for n in order:
                if self.rank[n] == 0:
                    self.group_base[r][self.group_of[n]] = pos
                self.base[r][n] = pos
                line.append(pos)
                pos += problem.capacity[n][r]
            self.line_starts.append(line)

    def node_at(self, r: int, position: int) -> int:
        return self.order[bisect.bisect_right(self.line_starts[r], position) - 1]


# Node window: a unit may start now on at most this many nodes, the best-fitting ones (and the
# heuristic's choice), so the domains, like the variable count, do not grow with the system.
NODE_WINDOW_MIN = 64
NODE_WINDOW_PER_UNIT = 4


def candidate_nodes(pool: FreePool, job: Job, hinted: list[int],
                    mask: NodeMask | None = None) -> list[int]:
    """Nodes a unit of `job` may use at t: the best-fitting ones that hold one, in line order;
    with a site's `mask` (E_i less the windows the job would run into), only nodes of it (the
    hinted ones too: a list schedule may have placed anywhere)."""
    want = max(NODE_WINDOW_MIN, NODE_WINDOW_PER_UNIT * job.units)
    fitting = sorted(
        ((pool.score(vec), vec) for vec in pool.groups if units_per_node(vec, job.req) > 0),
    )
    if mask is not None:
        chosen = {n for n in hinted if n in mask}
        for _, vec in fitting:
            chosen.update(sorted(mask.of(pool.groups[vec]))[:want])
            if len(chosen) >= want:
                break
        return sorted(chosen)
    chosen = set(hinted)
    for _, vec in fitting:
        chosen.update(pool.smallest(vec, want))
        if len(chosen) >= want:
            break
    return sorted(chosen)


@dataclass(frozen=True, slots=True)
class _Link:
    """Variables tying one unit's positions to node k of group g."""

    group: int
    chosen: cp_model.IntVar | None  # literal "the unit is in group g" (None: only group)
    k: cp_model.IntVar
    offsets: dict[int, cp_model.IntVar]


class Pcp20Formulation(Formulation):
    """The PCP'20 model of `jobs` at t: the scheduling model (s_i, now_i, the objective over
    q_i and d_i, the pooled cumulatives after t) plus one position y per unit and resource
    type for the jobs that start now."""

    def add_allocation(self, inputs: ModelInputs) -> None:
        problem = self.problem
        self.lines = lines = ResourceLines(problem)
        self._free_now = np.asarray(problem.free_now.free, dtype=np.int64)
        # The free amounts of each pool a protected room lets jobs use now (by the pool's id).
        self._limits: dict[int, npt.NDArray[np.int64]] = {}
        cap = np.asarray(problem.capacity, dtype=np.int64)
        # Line position just past each node's units, per resource type.
        self._node_end = [np.asarray(lines.base[r], dtype=np.int64) + cap[:, r]
                          for r in range(len(problem.resources))]
        # y[job index][unit][r] for the types the job uses; primary type = first used one.
        self.y: dict[int, list[dict[int, cp_model.IntVar]]] = {}
        self.primary: dict[int, int] = {}
        # Where the absent units of a job that does not start now are hinted to sit: the start
        # of the first candidate node's free part (any value of the domain would do).
        self.parking: dict[int, tuple[int, dict[int, int]]] = {}
        # The same-node link variables of each multi-resource unit, to hint them too.
        self.links: dict[tuple[int, int], list[_Link]] = {}
        boxes: dict[int, list[cp_model.IntervalVar]] = defaultdict(list)
        for job, now in zip(self.jobs, self.schedule.now_literals, strict=True):
            stop_if(self.should_stop, "PCP'20 model")
            self._add_positions(job, now, inputs.heuristic.unit_nodes.get(job.index, []), boxes)
        self._add_no_overlap(boxes)
        self._add_allocation_search()

    def _add_positions(
        self,
        job: Job,
        now: cp_model.IntVar,
        hinted_nodes: list[int],
        boxes: dict[int, list[cp_model.IntervalVar]],
    ) -> None:
        """The rn_i units of `job`: a position y_r per resource type r it uses, inside the free
        part of a candidate node, and a box [y_r, y_r + req_i,r) on line r present iff now_i."""
        model = self.model
        used = [r for r, q in enumerate(job.req) if q > 0]
        self.primary[job.index] = used[0]
        candidates, free = self._candidates(job, hinted_nodes)
        if not len(candidates):
            model.add(now == 0)  # nowhere to go without delaying the head: not now
            self.y[job.index] = []
            return
        domains = self._position_domains(job, used, candidates, free)
        first = int(candidates[0])
        self.parking[job.index] = (
            first, {r: int(self._node_end[r][first] - free[first, r]) for r in used}
        )
        candidate_groups = sorted({self.lines.group_of[n] for n in candidates.tolist()})
        units: list[dict[int, cp_model.IntVar]] = []
        for u in range(job.units):
            y = {
                r: model.new_int_var_from_domain(domains[r], f"y_{job.index}_{r}_{u}")
                for r in used
            }
            for r in used:
                boxes[r].append(
                    model.new_optional_fixed_size_interval_var(
                        y[r], job.req[r], now, f"box_{job.index}_{r}_{u}"
                    )
                )
            if len(used) > 1:
                self.links[job.index, u] = self._same_node(
                    job, y, candidate_groups, f"{job.index}_{u}"
                )
            if units:
                # Units of a job are identical: order them along the primary line.
                r0 = used[0]
                model.add(units[-1][r0] + job.req[r0] <= y[r0]).only_enforce_if(now)
            units.append(y)
        self.y[job.index] = units

    def _candidates(
        self, job: Job, hinted_nodes: list[int]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """The nodes a unit of `job` may start on now, and the free amounts it sees there:
        what the protected room leaves it for its whole d_i (a job still running at the head's
        reserved start τ may only use `limit`; under the promise book, what every promise
        leaves free during its run). With a site's rules, only the nodes of the job's
        start-now mask: y[i][r][k] lies in the segments of E_i's nodes that no window the job
        would run into covers."""
        room = self.reservation
        limit = room.pool_for(job, self.problem.free_now) if room is not None else None
        if limit is None:
            pool, free = self.problem.free_now, self._free_now
        else:
            pool = limit
            if id(limit) not in self._limits:
                self._limits[id(limit)] = np.asarray(limit.free, dtype=np.int64)
            free = self._limits[id(limit)]
        rules = self.problem.eligibility
        mask = rules.now(job.index) if rules is not None else None
        candidates = np.asarray(candidate_nodes(pool, job, hinted_nodes, mask), dtype=np.int64)
        return candidates, free

    def _position_domains(
        self,
        job: Job,
        used: list[int],
        candidates: npt.NDArray[np.int64],
        free: npt.NDArray[np.int64],
    ) -> dict[int, cp_model.Domain]:
        """y_r starts inside the free part of a node: [end - free, end - req_i,r] per node."""
        return {
            r: cp_model.Domain.from_flat_intervals(
                np.column_stack(
                    (self._node_end[r][candidates] - free[candidates, r],
                     self._node_end[r][candidates] - job.req[r])
                ).ravel().tolist()
            )
            for r in used
        }

    def _add_no_overlap(self, boxes: dict[int, list[cp_model.IntervalVar]]) -> None:
        """diffn at t: no two present boxes share a unit of resource type r."""
        for line_boxes in boxes.values():
            self.model.add_no_overlap(line_boxes)

    def _add_allocation_search(self) -> None:
        """After the starts, the positions y: smallest domain first, as in the papers."""
        positions = [
            y for units in self.y.values() for unit in units for y in unit.values()
        ]
        self.model.add_decision_strategy(
            positions, cp_model.CHOOSE_MIN_DOMAIN_SIZE, cp_model.SELECT_MIN_VALUE
        )

    def _same_node(
        self, job: Job, y: dict[int, cp_model.IntVar], groups: list[int], tag: str
    ) -> list[_Link]:
        """y_r = base_g,r + cap_g,r × k + o_r with one k for every r: one unit, one node."""
        model, lines, cap = self.model, self.lines, self.problem.capacity
        chosen = [model.new_bool_var(f"g_{tag}_{g}") for g in groups] if len(groups) > 1 else []
        if chosen:
            model.add_exactly_one(chosen)
        links = []
        for i, g in enumerate(groups):
            gcap = cap[lines.groups[g][0]]
            k = model.new_int_var(0, len(lines.groups[g]) - 1, f"k_{tag}_{g}")
            offsets = {}
            for r, var in y.items():
                offsets[r] = model.new_int_var(0, gcap[r] - job.req[r], f"o_{tag}_{g}_{r}")
                link = model.add(var == lines.group_base[r][g] + gcap[r] * k + offsets[r])
                if chosen:
                    link.only_enforce_if(chosen[i])
            links.append(_Link(g, chosen[i] if chosen else None, k, offsets))
        return links

    def hint(self, plan: Plan) -> list[tuple[cp_model.IntVar, int]]:
        """A complete hint: starts, now literals, every position and every link variable."""
        hints = self.schedule.start_hints(plan.start_offsets)
        problem, lines, reservation = self.problem, self.lines, self.reservation
        # Units starting now fill each node's free part from its right end: the jobs with the
        # least room first (still running at τ: within the right `limit` part), then the others.
        cursor: dict[tuple[int, int], int] = {}  # (node, r) -> lowest position taken
        placed = [
            j for j in self.schedule.jobs
            if plan.start_offsets[j.index] == 0 and j.index in plan.unit_nodes and self.y[j.index]
        ]
        if reservation is not None:
            placed.sort(key=reservation.fill_order)
        where: dict[int, list[tuple[int, dict[int, int]]]] = {}  # job -> (node, y) per unit
        for job in placed:
            r0 = self.primary[job.index]
            counts = Counter(plan.unit_nodes[job.index])
            units: list[tuple[int, dict[int, int]]] = []
            # Units are ordered along the primary line (symmetry breaking): hint them so.
            for n in sorted(counts, key=lambda n: lines.base[r0][n]):
                block: list[dict[int, int]] = [{} for _ in range(counts[n])]
                for r in self.y[job.index][0]:
                    top = cursor.get((n, r), lines.base[r][n] + problem.capacity[n][r])
                    first = top - counts[n] * job.req[r]
                    for k, unit in enumerate(block):
                        unit[r] = first + k * job.req[r]
                    cursor[n, r] = first
                units.extend((n, unit) for unit in block)
            where[job.index] = units
        for job in self.schedule.jobs:
            parked = self.parking.get(job.index)
            for u, unit_vars in enumerate(self.y[job.index]):
                node, values = where[job.index][u] if job.index in where else parked  # type: ignore[misc]
                hints.extend((unit_vars[r], values[r]) for r in unit_vars)
                for link in self.links.get((job.index, u), ()):
                    inside = lines.group_of[node] == link.group
                    if link.chosen is not None:
                        hints.append((link.chosen, int(inside)))
                    if inside:
                        k = lines.rank[node]
                        gcap = problem.capacity[lines.groups[link.group][0]]
                        hints.append((link.k, k))
                        hints.extend(
                            (o, values[r] - lines.group_base[r][link.group] - gcap[r] * k)
                            for r, o in link.offsets.items()
                        )
        return hints

    def extract(self, values: SolutionValues) -> Plan:
        plan = Plan(self.schedule.start_offsets_of(values))
        for job in self.schedule.jobs:
            if plan.start_offsets[job.index] == 0:
                r0 = self.primary[job.index]
                plan.unit_nodes[job.index] = [
                    self.lines.node_at(r0, values.value(unit[r0])) for unit in self.y[job.index]
                ]
        return plan


class Pcp20Dispatcher(CpDispatcher):
    name: ClassVar[str] = "pcp20"
    # The tables of README.md and docs/configuration.md (scripts/gen_tables.py).
    table: ClassVar[TableRow] = TableRow(
        summary="CP with system-size-independent allocation: one position per unit and "
        "resource type on a line of all units, no two boxes overlapping at t",
        model_size="independent of nodes")
    # Positions are per unit: beyond this many units CP-SAT spends longer loading the model
    # than a decision may take (it ignores stop requests while loading).
    max_model_units: ClassVar[int | None] = 1024
    formulation: ClassVar[type[Formulation]] = Pcp20Formulation
