"""Conservative backfilling with the classic guarantee: no job starts later than its reservation
at arrival (Mu'alem & Feitelson 2001), as long as the running work ends by its predicted ends.

Every queued job holds a reservation: the earliest time s_i >= t at which its rn_i units fit
node by node for all of d_i, around the running work and every reservation made before it
(`backfill.plan_backfill` with unlimited depth), in priority order (the workload manager's,
then submit order; submit order alone without priorities), on the nodes of its E_i and into no
window that does not admit it (`NodeProfile`, which reads a site's rules). A job whose
reservation is now starts now. A window that appears on a reservation's nodes later displaces
it: it is reserved anew, after the window or on other nodes.

The reservations are kept between decisions (`ReservationBook`), per caller, cluster and node
list (`planning.caller_scope.BookKey`): one caller's decisions never move another's
reservations, even on the same nodes. At each decision the reservations held so far are
placed first, as they are, then compressed in order of their start: each is taken out and put
back at its earliest start given all the others, which is never later than where it was (its
own slot is free again) — so a reservation only ever moves earlier, and none is disturbed by
the ones after it. Only then do the jobs seen for the first time get theirs, in submit order,
around all of them.

Rebuilding every reservation from scratch in submit order at each decision (what this
dispatcher did before issue #24) breaks the guarantee: when a job ends early, an older job
whose reservation was late can take the hole a younger job had been given at its arrival, and
the younger job moves later (KTH-SP2, job 198: reserved at arrival for 709,406, started at
712,817).

Reservations hold nodes, but a job needs only some nodes at its start: a job that fits now in
the pooled view, every other reservation in place, may still not fit node by node because the
reservations sit on nodes it needs (KTH-SP2, job 218: 4 cores fitted the free cores at 714,058
and it started 6,679 s later). Such a job gets the later reservations moved to other nodes, at
their own start times, when they all fit there (`backfill._repack`); then it starts now.

A held reservation that no longer fits (a running job outlived its predicted end, a node went
down, the prediction d_i grew, or the caller did not start a job it was told to start) is
dropped and its job is reserved anew after the compressed ones: the guarantee holds for
predictions that hold (with the `walltime` predictor, for jobs killed at their requested time).
A decision at an earlier time than the last one of the same book starts afresh (a new replay);
one at the same time starts from the reservations held before the last one (a retry).

Past the deadline, or once the caller is gone, the jobs placed so far are the decision (each
placement is valid on its own, and the earlier reservations are intact) and the rest wait,
keeping the reservations they held.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import ClassVar

from .backfill import UNLIMITED, BackfillPlan, outcome_of, plan_backfill
from .base import Outcome, SearchControl
from .easy import promised_at_the_limits
from .planning.caller_scope import BookKey, book_key
from .planning.job_orders import by_priority
from .planning.problem import Problem
from .planning.stopping import StopCheck, never
from .table_row import TableRow

JobKey = tuple[str, int]  # (job id, q_i)
Held = dict[JobKey, tuple[int, list[int]]]  # absolute start, node index of each unit
MAX_BOOKS = 64  # (caller, cluster, node list) books kept, the least recently used dropped


def plan_reservations(
    problem: Problem, first_fit: bool = False, should_stop: StopCheck = never
) -> BackfillPlan:
    """Reservations for every queued job in priority order, from scratch (no held ones)."""
    return plan_backfill(problem, by_priority(problem), UNLIMITED, first_fit, should_stop)


@dataclass(slots=True)
class _Book:
    t: int  # time of the last decision
    before: Held  # the reservations held when it began
    after: Held  # the reservations it left


class ReservationBook:
    """The reservation each queued job holds, per caller, cluster and node list, between
    decisions."""

    def __init__(self, capacity: int = MAX_BOOKS) -> None:
        self._books: OrderedDict[BookKey, _Book] = OrderedDict()
        self._lock = threading.Lock()
        self._capacity = capacity

    def held(self, key: BookKey, t: int) -> Held:
        """What the jobs hold at a decision at t: the last decision's result if it was before
        t, what it started from if it was at t (a retry), nothing otherwise."""
        with self._lock:
            book = self._books.get(key)
            if book is None or t < book.t:
                return {}
            self._books.move_to_end(key)
            return book.after if t > book.t else book.before

    def record(self, key: BookKey, t: int, before: Held, after: Held) -> None:
        with self._lock:
            self._books[key] = _Book(t, before, after)
            self._books.move_to_end(key)
            while len(self._books) > self._capacity:
                self._books.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._books.clear()


class ConservativeDispatcher:
    name: ClassVar[str] = "conservative"
    # The tables of README.md and docs/configuration.md (scripts/gen_tables.py).
    table: ClassVar[TableRow] = TableRow(
        summary="conservative backfilling: every queued job gets a node-level reservation when "
        "it arrives, kept between decisions (per caller and cluster) and only ever moved "
        "earlier, so no job starts later than its reservation at arrival",
        head="every queued job holds one, kept between decisions and only ever moved earlier",
        backfill="submit order")

    def __init__(self) -> None:
        self.book = ReservationBook()

    def decide(self, problem: Problem, control: SearchControl) -> Outcome:
        plan, _ = self.plan(problem, control)
        outcome = outcome_of(problem, plan, promised=True)  # its reservations are promises
        # Displaced reservations were reserved anew, after the others: not kept.
        for i in plan.displaced:
            start, _ = outcome.expected_starts.get(i, (0, False))
            if start > 0:
                outcome.expected_starts[i] = (start, False)
        return promised_at_the_limits(problem, outcome)

    def plan(self, problem: Problem, control: SearchControl) -> tuple[BackfillPlan, Held]:
        """The decision's plan, and the reservations (absolute starts) it leaves held."""
        t = problem.t
        key = book_key(control.scope, problem)
        before = self.book.held(key, t)
        keys = [(job.id, job.submit) for job in problem.jobs]
        held = {
            i: (before[k][0] - t, before[k][1]) for i, k in enumerate(keys) if k in before
        }
        plan = plan_backfill(
            problem, by_priority(problem), UNLIMITED, control.first_fit, control.should_stop, held,
            repack=True,
        )
        after: Held = {keys[i]: (t + s, nodes) for i, (s, nodes) in plan.reservations.items()}
        for i in plan.unplanned:  # not reached before the stop: they keep what they held
            if keys[i] in before:
                after[keys[i]] = before[keys[i]]
        self.book.record(key, t, before, after)
        return plan, after
