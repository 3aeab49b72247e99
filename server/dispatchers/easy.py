"""EASY backfilling with a protected reservation for the head job.

Jobs start in submit order while they fit. The first job that does not fit (the head) gets a
reservation at the earliest time τ at which enough units fit node by node, computed from the
predicted ends of running jobs. Any later job may start now if it fits and either ends by τ,
or uses only resources that the head's reservation leaves free at τ on every node it touches.
"""

from __future__ import annotations

from typing import ClassVar

from hpcdispatch.server.dispatchers.base import HEURISTIC, Outcome, SearchControl
from hpcdispatch.server.dispatchers.free_pool import FreePool
from hpcdispatch.server.dispatchers.job_selection import never_fits, submit_order
from hpcdispatch.server.dispatchers.problem import Job, Problem
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
        shadow_time, at_shadow = self._reservation(problem, now, outcome, head)
        # `limit` is what a job still running at τ may use: free now and left by the reservation.
        limit = FreePool(
            [tuple(map(min, a, b)) for a, b in zip(now.free, at_shadow.free, strict=True)],
            problem.eligible,
            now.scale,
        )
        for job in queue[position + 1 :]:
            if job.duration <= shadow_time:
                nodes = now.place(job.req, job.units, control.first_fit)
                if nodes is not None:
                    for n in set(nodes):
                        limit.set(n, tuple(map(min, now.free[n], at_shadow.free[n])))
            else:
                nodes = limit.place(job.req, job.units, control.first_fit)
                if nodes is not None:
                    now.take_all(nodes, job.req)
                    at_shadow.take_all(nodes, job.req)
            if nodes is None:
                fits_now = now.units_fit(job.req, job.units) >= job.units
                reason = pb.SKIP_REASON_BLOCKED if fits_now else pb.SKIP_REASON_CANNOT_FIT_NOW
                outcome.skipped.append((job.index, reason))
            else:
                outcome.starts[job.index] = nodes
                outcome.considered.append(job.index)
        return outcome

    @staticmethod
    def _skip_never(problem: Problem, job: Job, outcome: Outcome) -> bool:
        if never_fits(problem, job):
            outcome.skipped.append((job.index, pb.SKIP_REASON_NEVER_FITS))
            return True
        return False

    @staticmethod
    def _reservation(
        problem: Problem, now: FreePool, outcome: Outcome, head: Job
    ) -> tuple[int, FreePool]:
        """(τ relative to t, free pool at τ with the head's units already taken)."""
        releases: dict[int, list[tuple[int, tuple[int, ...]]]] = {}
        for end, blocks in problem.releases_by_time():
            releases.setdefault(end, []).extend((b.node, b.amounts) for b in blocks)
        by_index = {j.index: j for j in problem.jobs}
        for index, nodes in outcome.starts.items():
            job = by_index[index]
            for n in nodes:
                releases.setdefault(job.duration, []).append((n, job.req))
        pool = now.copy()
        for end in sorted(releases):
            for n, amounts in releases[end]:
                pool.give(n, amounts)
            if pool.units_fit(head.req, head.units) >= head.units:
                reserved = pool.place(head.req, head.units)
                assert reserved is not None
                return end, pool
        raise AssertionError("a job that fits an empty system must fit once all work ends")
