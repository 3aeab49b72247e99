"""EASY-k: EASY backfilling with reservations for the first k blocked jobs, not the head only.

Jobs are taken in priority order (the workload manager's, then submit order; submit order
alone without priorities). Each gets the earliest start at which it fits node by node
around the running work and the jobs before it; it starts now if that is now, otherwise it
holds the reservation, until k jobs hold one (k = `SearchSettings.reservation_depth`,
`search.reservation_depth` in a request; 64 by default, flux-sched's "hybrid" queue policy
default). After that a job starts now only if it fits now for all of its d_i without touching
any of the k reservations, else waits. k = 1 is EASY; k at least the queue's length is
conservative backfilling rebuilt at each decision (`backfill.plan_backfill`, one base for all).
A plan is carried on at the next decision if nothing but the jobs it started changed on the
nodes since, and jobs were only submitted (`kept_plan.KeptPlan`: the same plan, made faster).
Under a site's rules every reservation and start is on the job's E_i and into no window that
does not admit it (`NodeProfile` reads them), and the plan is made anew at each decision.
"""

from __future__ import annotations

from typing import ClassVar

from .backfill import outcome_of
from .base import Outcome, SearchControl
from .easy import promised_at_the_limits
from .kept_plan import KeptPlan
from .planning.job_orders import by_priority
from .planning.problem import Problem
from .table_row import TableRow


class EasyKDispatcher:
    name: ClassVar[str] = "easy-k"
    # The tables of README.md and docs/configuration.md (scripts/gen_tables.py).
    table: ClassVar[TableRow] = TableRow(
        summary="EASY with reservations for the first `reservation_depth` blocked jobs (64; 1 "
        "is EASY), as flux-sched's queue policies",
        head="the first k blocked jobs in submit order each hold one",
        backfill="submit order, delaying none of the k",
        parameter="`reservation_depth` = k (64)")

    def __init__(self) -> None:
        self.kept = KeptPlan()

    def decide(self, problem: Problem, control: SearchControl) -> Outcome:
        depth = max(1, control.settings.reservation_depth)
        order = by_priority(problem)
        plan = self.kept.plan(problem, order, depth, control.first_fit, control.should_stop)
        outcome = outcome_of(problem, plan)
        # The first reservation in submit order is EASY's head's, reserved before all others
        # and delayed by nothing started after it: a promise. The k - 1 after it may move
        # later when one before them moves earlier onto their nodes: estimates.
        starts = outcome.expected_starts
        head = next((j.index for j in order if j.index in starts), None)
        if head is not None:
            starts[head] = (starts[head][0], True)
        return promised_at_the_limits(problem, outcome)
