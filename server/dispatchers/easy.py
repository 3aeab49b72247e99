"""EASY backfilling with a protected reservation for the head job.

Jobs start in queue order (the workload manager's priority, then submit order, here; other
orders in `easy_ordered`) while they fit.
The first job that does not fit (the head) gets a reservation at the earliest time τ at which
enough units fit node by node, computed from the predicted ends of running jobs. Any later job,
in queue order (or `backfill_order`), may start now if it fits and either ends by τ, or uses only
resources that the head's reservation leaves free at τ on every node it touches.

Past the deadline, or once the caller is gone, the jobs placed so far are the decision (each
placement is valid on its own) and the rest wait (BLOCKED).

A site's rules (`planning.eligibility`): every job started now, in the queue's order or
backfilled, is placed only on the nodes its partitions and features allow and no window it
would run into covers (`Eligibility.now`). The head is the first job in queue order that does
not fit now where its rules allow it (priority order: a high-priority job blocked on its own
partition is the head, whatever is free elsewhere). Its reservation is planned on the planner
that reads the rules (`reservation.reserve` on `NodeProfile`): on nodes of its E_i only, and
never into a window that does not admit it (τ after the window, or on other nodes), so the
head is protected on nodes it can use, and jobs of other partitions backfill around it freely.
A head already promised (`Job.promised`) keeps its place until it starts, whatever arrives with
a higher priority (`promise_holder_first`): the promise is a guarantee under priorities too.
"""

from __future__ import annotations

from typing import ClassVar

from ..domain.free_pool import FreePool, NodeMask
from ..domain.outcome_kinds import SkipReason
from .base import HEURISTIC, Outcome, SearchControl
from .planning.eligibility import Eligibility
from .planning.guaranteed_starts import promises_only_at_the_limits
from .planning.job_orders import by_priority
from .planning.job_selection import never_fits
from .planning.problem import Job, Problem
from .planning.reservation import (
    KeptReservation,
    Reservation,
    place_around_reservation,
    reserve,
)
from .planning.stopping import StopCheck, Stopped, every_few
from .table_row import TableRow


class EasyDispatcher:
    name: ClassVar[str] = "easy"
    # The tables of README.md and docs/configuration.md (scripts/gen_tables.py); a subclass
    # states its own (the script reads a class's own row, never an inherited one).
    table: ClassVar[TableRow] = TableRow(
        summary="EASY backfilling: the first blocked job gets a node-level reservation at the "
        "earliest time it fits; later jobs start now only if they end before it or use only "
        "what the reservation leaves free",
        head="first job in submit order that does not fit", backfill="submit order")
    # Whether the head's reservation is reported as a promise (ExpectedStart.promised): in
    # submit order the head stays the head until it starts, and nothing backfilled delays it,
    # so its reservation only moves earlier while the expected durations hold. In another
    # queue order (easy_ordered) a job that arrives later may take its place: an estimate.
    promises_head: ClassVar[bool] = True

    def decide(self, problem: Problem, control: SearchControl) -> Outcome:
        outcome = Outcome(placements={}, status=HEURISTIC)
        free_now = problem.free_now.copy()
        queue = self._may_fit(problem, outcome)
        # In queue order while they fit (names bound once: thousands of jobs on large systems).
        place, first_fit = free_now.place, control.first_fit
        placements, considered = outcome.placements, outcome.considered
        should_stop = every_few(control.should_stop)
        masks = problem.eligibility
        position = 0
        for job in queue:
            if should_stop():
                return self._stopped(outcome, queue[position:])
            mask = masks.now(job.index) if masks else None
            nodes = place(job.req, job.units, first_fit, mask)
            if nodes is None:
                break  # the head: its reservation reads its rules
            placements[job.index] = nodes
            considered.append(job.index)
            position += 1
        if position == len(queue):
            return outcome

        return self.around_the_head(problem, control, outcome, free_now, queue[position],
                                    queue[position + 1 :])

    def around_the_head(
        self, problem: Problem, control: SearchControl, outcome: Outcome, free_now: FreePool,
        head: Job, rest: list[Job],
    ) -> Outcome:
        """The jobs after the first one that does not fit now (`head`, which gets the
        reservation): EASY's backfill around it, in `backfill_order`."""
        if not any_fits_now(free_now, rest):
            # Nothing after the head fits in what is free now: no reservation can change
            # that, so none is made (the outcome is the one backfill_around would give).
            outcome.considered.append(head.index)
            outcome.skipped.extend(
                (job.index, SkipReason.CANNOT_FIT_NOW) for job in self.backfill_order(
                    problem, rest))
            return outcome
        try:
            reservation = reserve_for_head(problem, outcome, free_now, head, control)
        except Stopped:
            return self._stopped(outcome, [head, *rest])
        outcome.considered.append(head.index)
        outcome.expected_starts[head.index] = (reservation.start, self.promises_head)
        rest = self.backfill_order(problem, rest)
        backfill_around(outcome, free_now, reservation, rest, control.first_fit,
                        every_few(control.should_stop), problem.eligibility)
        return promised_at_the_limits(problem, outcome)

    def queue_order(self, problem: Problem) -> list[Job]:
        """The queue order: the head is the first job of it that does not fit now (priority,
        then submit order: submit order alone without priorities), after the job that holds
        the head's promise, if one does (`promise_holder_first`)."""
        order = by_priority(problem)
        return promise_holder_first(order) if self.promises_head else order

    def backfill_order(self, problem: Problem, rest: list[Job]) -> list[Job]:
        """The order in which the jobs after the head are tried for backfilling: the queue
        order here (`easy_ordered` has SJBF and LXF, which backfill in another order)."""
        return rest

    @staticmethod
    def _stopped(outcome: Outcome, waiting: list[Job]) -> Outcome:
        outcome.skipped.extend((job.index, SkipReason.BLOCKED) for job in waiting)
        return outcome

    def _may_fit(self, problem: Problem, outcome: Outcome) -> list[Job]:
        """The queue in its order, less the jobs that never fit (skipped as such)."""
        queue = []
        fit_empty = problem.units_fit_empty  # never_fits, for each job
        restricted = problem.eligibility.nodes if problem.eligibility else {}
        for job in self.queue_order(problem):
            if fit_empty(job.req) < job.units or (
                    job.index in restricted and never_fits(problem, job)):
                outcome.skipped.append((job.index, SkipReason.NEVER_FITS))
            else:
                queue.append(job)
        return queue


def promise_holder_first(order: list[Job]) -> list[Job]:
    """`order` with the job that holds an earlier decision's promise (`Job.promised`, sent
    back or kept by the session) first: the head keeps its place until it starts.

    In priority order a job that arrives later with a higher priority would take the head's
    place, and the old head's reservation, shown as a promise, would get later (issue #50:
    5 of 76 promises late on the atlas-priority preset). Taken first, the holder is the head
    again while it does not fit (or starts now), and its reservation is planned before
    anything else: every job started since was fitted around it, and under the limits the
    running work ends no later than planned, so the reservation is never later than the
    promise. The new job of higher priority starts now where it fits around it (backfilled)
    and is the head once the holder starts. Without priorities the holder is the first job in
    submit order anyway: the order is unchanged. Several holders (a caller's promises from
    another dispatcher): the earliest promise first, the others in the queue's order."""
    holder = min((job for job in order if job.promised is not None),
                 key=lambda job: job.promised or 0, default=None)
    if holder is None or holder is order[0]:
        return order
    return [holder, *(job for job in order if job is not holder)]


def reserve_for_head(
    problem: Problem, outcome: Outcome, free_now: FreePool, head: Job, control: SearchControl
) -> Reservation:
    """The head's reservation, around the jobs `outcome` starts now (already taken from
    `free_now`); raises Stopped when the control says stop. With none started, the last such
    reservation when nothing it depends on changed since (`KEPT`)."""
    if not outcome.placements:
        return KEPT.reserve(problem, free_now, head, control.should_stop)
    started = ((problem.jobs[i], nodes) for i, nodes in outcome.placements.items())
    return reserve(problem, free_now, head, started, control.should_stop)


# The head reservation of the last decision that started nothing before its head.
KEPT = KeptReservation()


def any_fits_now(free_now: FreePool, jobs: list[Job]) -> bool:
    """Whether some job of `jobs` has its rn_i units fit in `free_now` (one question per
    distinct per-unit request, for the fewest units asking it)."""
    fewest: dict[tuple[int, ...], int] = {}
    for job in jobs:
        known = fewest.get(job.req)
        if known is None or job.units < known:
            fewest[job.req] = job.units
    return any(free_now.units_fit(req, units) >= units for req, units in fewest.items())


def backfill_around(
    outcome: Outcome, free_now: FreePool, reservation: Reservation, jobs: list[Job],
    first_fit: bool, should_stop: StopCheck, masks: Eligibility | None = None,
) -> Outcome:
    """EASY's backfill: each of `jobs`, in order, starts now where it fits without touching the
    head's `reservation` (it ends before τ, or uses what the head leaves free), on the nodes
    `masks` allows it now; the others are skipped as blocked or not fitting now, and all that
    are left when `should_stop()` says so as blocked."""
    for rank, job in enumerate(jobs):
        if should_stop():
            outcome.skipped.extend((j.index, SkipReason.BLOCKED) for j in jobs[rank:])
            return outcome
        mask = masks.now(job.index) if masks else None
        nodes = (place_around_reservation(free_now, reservation, job, first_fit) if mask is None
                 else place_masked_around(free_now, reservation, job, first_fit, mask))
        if nodes is None:
            fits_now = free_now.units_fit(job.req, job.units) >= job.units
            reason = SkipReason.BLOCKED if fits_now else SkipReason.CANNOT_FIT_NOW
            outcome.skipped.append((job.index, reason))
            continue
        outcome.placements[job.index] = nodes
        outcome.considered.append(job.index)
    return outcome


def place_masked_around(free_now: FreePool, reservation: Reservation, job: Job, first_fit: bool,
                        mask: NodeMask) -> list[int] | None:
    """`place_around_reservation` on the nodes of `mask` only: a job running past τ chooses
    in the reservation's `limit`, any other in what is free now."""
    pool = reservation.limit if reservation.runs_past(job) else free_now
    if pool.units_fit(job.req, job.units) < job.units:
        return None  # not even on every node (the pool's kept counts, no cut to the mask)
    nodes = pool.choose(job.req, job.units, first_fit, mask)
    if nodes is None:
        return None
    free_now.take_all(nodes, job.req)
    reservation.take(free_now, nodes, job)
    return nodes


def promised_at_the_limits(problem: Problem, outcome: Outcome) -> Outcome:
    """`outcome` with its reservations reported as promises only where they were planned at
    the requested times, else as estimates (`planning.guaranteed_starts`): the decision is
    unchanged."""
    promises_only_at_the_limits(problem, outcome.expected_starts)
    return outcome
