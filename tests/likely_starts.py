"""A stand-in dispatcher whose outcome carries every field of a promise (issue #49, item 2):
conservative's decision and reservations (promises, from requested times under `walltime`),
each with a likely start beside it, and some of them reported as moved later, with a reason.

Its figures follow from the problem alone (the same snapshot gives the same outcome), so a
replay through gRPC and one in process record the same: the likely start is 3/4 of the way
from t to the promise; a job whose id ends in 3 moved 120 s later because a running job ran
past its limit, one whose id ends in 7 moved 60 s later for a reason not said.
"""

from __future__ import annotations

import dataclasses

from hpcdispatch.server.dispatchers.base import Outcome, PromiseMove, SearchControl
from hpcdispatch.server.dispatchers.conservative import ConservativeDispatcher
from hpcdispatch.server.dispatchers.planning.problem import Problem

RAN_PAST = 120  # seconds a job whose id ends in 3 moved later (RAN_PAST_LIMIT)
NOT_SAID = 60  # seconds a job whose id ends in 7 moved later (no reason given)


def likely_of(promise: int) -> int:
    """The likely start beside a promise `promise` seconds after t."""
    return promise * 3 // 4


class PromisingWithLikelyStarts:
    """Conservative's decision, its promises given likely starts and some moves (module doc)."""

    name = "conservative"

    def __init__(self) -> None:
        self.inner = ConservativeDispatcher()

    def decide(self, problem: Problem, control: SearchControl) -> Outcome:
        outcome = self.inner.decide(problem, control)
        likely: dict[int, int] = {}
        moved: dict[int, int] = {}
        reasons: dict[int, PromiseMove] = {}
        for i, (start, promised) in outcome.expected_starts.items():
            if not promised:
                continue
            likely[i] = likely_of(start)
            job_id = problem.jobs[i].id
            if job_id.endswith("3"):
                moved[i], reasons[i] = RAN_PAST, PromiseMove.RAN_PAST_LIMIT
            elif job_id.endswith("7"):
                moved[i] = NOT_SAID
        return dataclasses.replace(outcome, likely_starts=likely, promises_moved=moved,
                                   promise_move_reasons=reasons)
