"""HCP'19 (CP 2019): CP scheduling on pooled capacity, then best-fit allocation.

The model sees one cumulative per resource type over the whole system; pooling hides
fragmentation, so a job the model starts at t may not fit on any node and then waits.

Under the promise book, every promise is a fixed block of the cumulatives: job j promised P_j
holds rn_j × req_j,r of each type r over [P_j, P_j + d_j), so the window's s_i are planned on
Tcap_r less the running work and every promise (the node profile's sum). The jobs with s_i = t
are then placed best fit on what every promise leaves each node for all of their d_i; one
that does not fit so waits.

A site's rules (issue #50, `planning.eligibility`): pooled capacity per eligibility class. The
window's restricted jobs are grouped by E_i, the nodes their partitions and features allow; each
distinct E_i is a class C with its own cumulative per resource type r, of capacity
Tcap_C,r = Σ_{n ∈ C, up} cap[n][r], holding the running work on C's nodes until its end and
every job of the window whose E_i lies inside C (its own class and the classes nested in it).
The whole-system cumulative stays and holds every job: it is the class of the unrestricted jobs.
Why per class with nesting, and not per union of classes: jobs restricted to C must fit on C at
every instant, and a job of a class nested in C (a feature inside a partition) takes C's room
too; the exact pooled condition, Hall's, asks it of every union of classes (2^k cumulatives for
k classes), while partitions are mostly disjoint or nested, where the k cumulatives plus the
whole system's say nearly as much. A job whose pooled demand exceeds its class's Tcap never
fits it: it stays out of the class cumulatives and does not start now. The protected room (a
head's reservation, the promises) is held by the whole-system cumulative only. The starts after
t are pooled per class: neither the windows nor the nodes shape them (they are planned anew
when they start). The jobs with s_i = t are then placed best fit on their start-now nodes (E_i
less the windows they would run into, `Eligibility.now`), around the protected room, the
narrowest E_i first (a job with one node takes it before a job that could go elsewhere); one
that does not fit there waits.
"""

from __future__ import annotations

from collections import defaultdict
from typing import ClassVar

from ortools.sat.python import cp_model

from ...domain.free_pool import Vec
from ..planning.plan import Plan
from ..planning.problem import Job
from ..planning.protected_room import place_now
from ..planning.stopping import stop_if
from ..table_row import TableRow
from .cp_dispatch import CpDispatcher
from .formulation import Formulation, ModelInputs
from .start_now_rules import place_within


class Hcp19Formulation(Formulation):
    """The scheduling model alone: starts on pooled capacity (per eligibility class with a
    site's rules), nodes chosen afterwards."""

    def add_allocation(self, inputs: ModelInputs) -> None:
        """With a site's rules, one cumulative per eligibility class and resource type."""
        rules = self.problem.eligibility
        if rules is None:
            return
        classes: set[frozenset[int]] = set()
        for job in self.jobs:
            allowed = rules.allowed(job.index)
            if allowed is not None:
                classes.add(allowed)
        if not classes:
            return
        self.pooled_plans_fit = False  # a pooled list schedule may overfill a class
        for nodes in sorted(classes, key=lambda c: (len(c), min(c, default=-1))):
            stop_if(self.should_stop, "HCP'19 model")
            self._class_cumulatives(nodes)

    def _class_cumulatives(self, nodes: frozenset[int]) -> None:
        """cumulative over class C = `nodes`: the running work on C's up nodes and every job
        whose E_i lies in C, within Tcap_C,r; a job too large for its class does not start
        now."""
        problem, model, rules = self.problem, self.model, self.problem.eligibility
        assert rules is not None
        up = [n for n in nodes if problem.eligible[n]]
        n_res = len(problem.resources)
        cap = [sum(problem.capacity[n][r] for n in up) for r in range(n_res)]
        members: list[tuple[Job, cp_model.IntervalVar]] = []
        for job, interval, now in zip(self.jobs, self.schedule.intervals,
                                      self.schedule.now_literals, strict=True):
            allowed = rules.allowed(job.index)
            if allowed is None or not allowed <= nodes:
                continue
            if any(d > c for d, c in zip(job.demand(), cap, strict=True)):
                if allowed == nodes:
                    model.add(now == 0)  # E_i can never hold it
                continue
            members.append((job, interval))
        if not members:
            return
        held = self._running_on(frozenset(up))
        fixed = [(model.new_fixed_size_interval_var(0, end, f"held_{end}"), amounts)
                 for end, amounts in sorted(held.items())]
        for r in range(n_res):
            if not any(job.req[r] for job, _ in members):
                continue
            model.add_cumulative(
                [iv for iv, a in fixed if a[r]] + [iv for _, iv in members],
                [a[r] for _, a in fixed if a[r]] + [job.demand()[r] for job, _ in members],
                cap[r],
            )

    def _running_on(self, nodes: frozenset[int]) -> dict[int, Vec]:
        """The running work on `nodes` merged by end (relative to t): end -> amounts."""
        held: dict[int, list[int]] = defaultdict(lambda: [0] * len(self.problem.resources))
        for b in self.problem.blocks:
            if b.node in nodes:
                row = held[b.end]
                for r, a in enumerate(b.amounts):
                    row[r] += a
        return {end: tuple(row) for end, row in held.items()}

    def allocate(self, plan: Plan, first_fit: bool) -> dict[int, list[int]]:
        """Best fit, in priority order, for the jobs the schedule starts at t, around the
        protected room (the head's reservation, or the promises); under a site's rules each
        on its start-now nodes (`Eligibility.now`), the jobs of the fewest nodes E_i first
        (then in priority order)."""
        pool = self.problem.free_now.copy()
        room = self.reservation.copy() if self.reservation is not None else None
        rules = self.problem.eligibility
        placements: dict[int, list[int]] = {}
        starting = [j for j in self.schedule.jobs if plan.start_offsets[j.index] == 0]
        if rules is not None:  # the narrowest E_i first: a job with one node takes it first
            starting.sort(key=lambda j: _breadth(rules.allowed(j.index)))
        for job in starting:
            mask = rules.now(job.index) if rules is not None else None
            nodes = (place_now(pool, room, job, first_fit) if mask is None
                     else place_within(self.problem, pool, room, job, mask, first_fit))
            if nodes is not None:
                placements[job.index] = nodes
        return placements


def _breadth(allowed: frozenset[int] | None) -> float:
    """How many nodes E_i holds (every node: infinitely many)."""
    return float("inf") if allowed is None else len(allowed)


class Hcp19Dispatcher(CpDispatcher):
    name: ClassVar[str] = "hcp19"
    # The tables of README.md and docs/configuration.md (scripts/gen_tables.py).
    table: ClassVar[TableRow] = TableRow(
        summary="CP schedule on pooled capacity (one cumulative per resource type), then "
        "best-fit allocation of the jobs that start now",
        model_size="independent of nodes")
    exact_allocation_now: ClassVar[bool] = False

    formulation: ClassVar[type[Formulation]] = Hcp19Formulation
