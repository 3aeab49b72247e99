"""Conservative backfilling: every queued job gets a reservation, none delays an earlier one.

The queued jobs are taken in submit order (q_i, then queue position). Each gets a reservation
at the earliest time s_i >= t at which its rn_i units fit node by node for all of d_i, around
the predicted ends of the running work and the reservations of every job before it
(`NodeProfile`). A job whose reservation is at t starts now; the others wait. Since a job is
fitted only into what the earlier reservations leave, starting it now never delays one of them
(Mu'alem & Feitelson 2001); unlike EASY, which protects the head job only.

Reservations are recomputed from scratch at every decision, from the predicted durations, so a
job that ends early lets the next decision move later jobs forward (the usual "compression").
Past the deadline, or once the caller is gone, the jobs placed so far are the decision (each
placement is valid on its own, and the earlier reservations are intact) and the rest wait.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from hpcdispatch.v1 import dispatcher_pb2 as pb

from .base import HEURISTIC, Outcome, SearchControl
from .planning.job_orders import fcfs
from .planning.job_selection import never_fits
from .planning.node_profile import NodeProfile
from .planning.problem import Job, Problem
from .planning.stopping import StopCheck, Stopped, never


@dataclass(slots=True)
class ConservativePlan:
    """Reservations in queue order: job index -> (s_i - t, node of each unit)."""

    reservations: dict[int, tuple[int, list[int]]] = field(default_factory=dict)
    never: list[int] = field(default_factory=list)  # job indices no up nodes can ever hold
    # Jobs not reached before the stop (their reservations do not exist), in queue order.
    unplanned: list[int] = field(default_factory=list)


def plan_reservations(
    problem: Problem, first_fit: bool = False, should_stop: StopCheck = never
) -> ConservativePlan:
    """Reserve for every queued job in submit order; stops early (the rest unplanned) when
    `should_stop()` turns true."""
    plan = ConservativePlan()
    queue: list[Job] = []
    for job in fcfs(problem):
        if never_fits(problem, job):
            plan.never.append(job.index)
        else:
            queue.append(job)
    if not queue:
        return plan
    if should_stop():
        plan.unplanned = [j.index for j in queue]
        return plan
    profile = NodeProfile(problem)
    for rank, job in enumerate(queue):
        try:
            start = profile.earliest(job, should_stop)
        except Stopped:
            plan.unplanned = [j.index for j in queue[rank:]]
            return plan
        plan.reservations[job.index] = (start, profile.place(job, start, first_fit))
    return plan


class ConservativeDispatcher:
    name: ClassVar[str] = "conservative"
    kind: ClassVar[int] = pb.DISPATCHER_CONSERVATIVE

    def decide(self, problem: Problem, control: SearchControl) -> Outcome:
        plan = plan_reservations(problem, control.first_fit, control.should_stop)
        outcome = Outcome(placements={}, status=HEURISTIC)
        outcome.skipped.extend((i, pb.SKIP_REASON_NEVER_FITS) for i in plan.never)
        for i, (start, nodes) in plan.reservations.items():
            if start == 0:
                outcome.placements[i] = nodes
                outcome.considered.append(i)
                continue
            job = problem.jobs[i]
            fits_now = problem.free_now.units_fit(job.req, job.units) >= job.units
            # Fits what is free now, but only by taking what an earlier reservation needs.
            reason = pb.SKIP_REASON_BLOCKED if fits_now else pb.SKIP_REASON_CANNOT_FIT_NOW
            outcome.skipped.append((i, reason))
        outcome.skipped.extend((i, pb.SKIP_REASON_BLOCKED) for i in plan.unplanned)
        return outcome
