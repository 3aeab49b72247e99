"""EASY backfilling with a protected reservation for the head job.

Jobs start in submit order while they fit. The first job that does not fit (the head) gets a
reservation at the earliest time τ at which enough units fit node by node, computed from the
predicted ends of running jobs. Any later job may start now if it fits and either ends by τ,
or uses only resources that the head's reservation leaves free at τ on every node it touches.
"""

from __future__ import annotations

from typing import ClassVar

from hpcdispatch.server.dispatchers.base import HEURISTIC, Outcome, SearchControl
from hpcdispatch.server.dispatchers.job_selection import never_fits, submit_order
from hpcdispatch.server.dispatchers.problem import Job, Problem
from hpcdispatch.server.dispatchers.reservation import place_now, reserve
from hpcdispatch.v1 import dispatcher_pb2 as pb


class EasyDispatcher:
    name: ClassVar[str] = "easy"
    kind: ClassVar[int] = pb.DISPATCHER_EASY

    def decide(self, problem: Problem, control: SearchControl) -> Outcome:
        outcome = Outcome(starts={}, status=HEURISTIC)
        now = problem.free_now.copy()
        queue = [j for j in submit_order(problem.jobs) if not self._skip_never(problem, j, outcome)]
        position = 0
        while position < len(queue):
            job = queue[position]
            nodes = now.place(job.req, job.units, control.first_fit)
            if nodes is None:
                break
            outcome.considered.append(job.index)
            outcome.starts[job.index] = nodes
            position += 1
        if position == len(queue):
            return outcome

        head = queue[position]
        outcome.considered.append(head.index)
        by_index = {j.index: j for j in problem.jobs}
        reservation = reserve(
            problem, now, head, ((by_index[i], nodes) for i, nodes in outcome.starts.items())
        )
        for job in queue[position + 1 :]:
            nodes = place_now(now, reservation, job, control.first_fit)
            if nodes is None:
                fits_now = now.units_fit(job.req, job.units) >= job.units
                reason = pb.SKIP_REASON_BLOCKED if fits_now else pb.SKIP_REASON_CANNOT_FIT_NOW
                outcome.skipped.append((job.index, reason))
                continue
            outcome.starts[job.index] = nodes
            outcome.considered.append(job.index)
        return outcome

    @staticmethod
    def _skip_never(problem: Problem, job: Job, outcome: Outcome) -> bool:
        if never_fits(problem, job):
            outcome.skipped.append((job.index, pb.SKIP_REASON_NEVER_FITS))
            return True
        return False
