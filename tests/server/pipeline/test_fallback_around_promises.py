"""Never empty-handed, never a broken promise (issue #49): when a promise book decision gives
up (cut by the deadline after its promises are placed, raising, failing the check, starting
nothing where a job fits), the answer is EASY's decision around the promises held, not plain
EASY, which may start a job into a promise's room; where not even the held promises could be
placed, plain EASY, and the answer says so. The book keeps what was answered.

The case: n1 busy until T + 1,000 (its requested time), n2 free. "head" (the oldest, both
nodes) is promised T + 1,000; "long" (n2, 5,000 s requested, 500 s predicted) and "short" (n2,
900 s requested) fit now. Plain EASY, planning with the predictions, backfills "long" (its
500 s end before the head's reservation): at its requested time it runs past the head's promise.
Around the promises only "short" (gone by T + 1,000) starts.

On main every one of these answers was plain EASY's ("long"), and there was no `deadline_cut`
nor `promises_unplaced`."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import ClassVar

import pytest

from hpcdispatch.decision_check import check_decision
from hpcdispatch.server.dispatchers import DISPATCHERS
from hpcdispatch.server.dispatchers.base import Outcome, PromisesUnplaced, SearchControl
from hpcdispatch.server.dispatchers.cp.decision import Abandoned, Decision, Next
from hpcdispatch.server.dispatchers.cp.decision_steps import DECISION_STEPS, Step
from hpcdispatch.server.dispatchers.cp.pcp20 import Pcp20Dispatcher
from hpcdispatch.server.dispatchers.planning.problem import Problem
from hpcdispatch.server.domain.duration_predictor import Completion, JobFacts
from hpcdispatch.server.domain.outcome_kinds import SolveStatus
from hpcdispatch.server.domain.profiles import PROFILES
from hpcdispatch.server.pipeline import (
    FALLBACK_CHECK_FAILED,
    FALLBACK_DEADLINE_CUT,
    FALLBACK_DISPATCHER_ERROR,
    FALLBACK_PROMISES_UNPLACED,
    FALLBACK_STARTED_NOTHING,
    DecisionResult,
    run_decision,
)
from hpcdispatch.snapshot import RunningJob, Snapshot, UnitAllocation
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.instances import T, node, queued

BOOK = dataclasses.replace(PROFILES["book"][0], deterministic=True)


class Tenth:
    """Users who over-state their run times tenfold: d_i is a tenth of the requested time."""

    def predict(self, job: JobFacts) -> int:
        return max(1, job.requested_time // 10)

    def predict_many(self, jobs: Sequence[JobFacts]) -> list[int]:
        return [self.predict(j) for j in jobs]

    def learn(self, completion: Completion) -> None:
        pass


def snapshot(t: int = T, short_started: bool = False) -> Snapshot:
    running = [RunningJob(id="r", user="u", name="r", start_time=T - 10, requested_time=1_010,
                          expected_duration=1_010,
                          units=(UnitAllocation("n1", {"core": 4}),))]
    queue = [queued("head", 4, 10_000, submit=T - 300, units=2),
             queued("long", 4, 5_000, submit=T - 200)]
    if short_started:
        running.append(RunningJob(id="short", user="u", name="q", start_time=T,
                                  requested_time=900, expected_duration=90,
                                  units=(UnitAllocation("n2", {"core": 4}),)))
    else:
        queue.append(queued("short", 4, 900, submit=T - 100))
    return Snapshot(t, (node(1), node(2)), tuple(running), tuple(queue))


def cut(d: Decision) -> Next:
    if getattr(d.dispatcher, "cut", False):
        raise Abandoned  # as a step past the deadline raises it
    return Next.GO_ON


class CutAfterThePromises(Pcp20Dispatcher):
    """PCP'20 whose decision is cut by the deadline right after the book's first step."""

    steps: ClassVar[tuple[Step, ...]] = (DECISION_STEPS[0], Step("cut", cut), *DECISION_STEPS[1:])
    cut = True


class Failing(Pcp20Dispatcher):
    """PCP'20 whose own decision raises, starts nothing (cut), or over-allocates; its fallback
    (`around_the_promises`) is PCP'20's."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how

    def decide(self, problem: Problem, control: SearchControl) -> Outcome:
        if self.how == "raises":
            raise RuntimeError("boom")
        if self.how == "nothing":
            return Outcome(placements={}, status=SolveStatus.UNKNOWN)
        return Outcome(placements={j.index: [0] * j.units for j in problem.jobs},
                       status=SolveStatus.HEURISTIC)


class Unplaced(Failing):
    """A book dispatcher whose promises could not be placed in time."""

    def around_the_promises(self, problem: Problem, control: SearchControl) -> Outcome | None:
        raise PromisesUnplaced("the deadline came first")


def decide(dispatcher: object, snap: Snapshot) -> DecisionResult:
    dispatchers = {**DISPATCHERS, pb.DISPATCHER_PCP20: dispatcher}
    result = run_decision(snap, pb.DISPATCHER_PCP20, Tenth(),
                          SearchControl(BOOK, time.monotonic() + 30),
                          dispatchers=dispatchers)  # type: ignore[arg-type]
    assert check_decision(snap, result.decision) == []
    return result


def started(result: DecisionResult) -> set[str]:
    return {s.job_id for s in result.decision.starts}


def promised(result: DecisionResult) -> dict[str, int]:
    jobs, t = result.problem.jobs, result.problem.t
    return {jobs[i].id: t + s for i, (s, kept) in result.outcome.expected_starts.items() if kept}


def test_the_book_itself_starts_only_what_leaves_the_promise_its_room() -> None:
    result = decide(Pcp20Dispatcher(), snapshot())
    assert result.fallback_code == "" and started(result) == {"short"}
    assert promised(result) == {"head": T + 1_000}


def test_a_decision_cut_after_its_promises_answers_easy_around_them() -> None:
    dispatcher = CutAfterThePromises()
    result = decide(dispatcher, snapshot())
    assert result.fallback_code == FALLBACK_DEADLINE_CUT, result.fallback_reason
    assert result.outcome.status == SolveStatus.FALLBACK
    assert started(result) == {"short"}  # not "long", which would outrun the head's promise
    assert promised(result) == {"head": T + 1_000}
    # The book holds what was answered: the next decision keeps the promise where it was.
    dispatcher.cut = False
    after = decide(dispatcher, snapshot(T + 1, short_started=True))
    assert after.fallback_code == "" and started(after) == set()
    assert promised(after) == {"head": T + 1_000} and not after.outcome.promises_moved


@pytest.mark.parametrize(("how", "code"), [("raises", FALLBACK_DISPATCHER_ERROR),
                                           ("nothing", FALLBACK_STARTED_NOTHING),
                                           ("overallocates", FALLBACK_CHECK_FAILED)])
def test_a_failed_book_decision_gets_easys_decision_around_the_promises(
    how: str, code: str,
) -> None:
    result = decide(Failing(how), snapshot())
    assert result.fallback_code == code
    assert "around the promises" in result.fallback_reason
    assert result.outcome.status == SolveStatus.FALLBACK
    assert started(result) == {"short"} and promised(result) == {"head": T + 1_000}


def test_promises_not_placed_in_time_get_plain_easy_and_say_so() -> None:
    result = decide(Unplaced("nothing"), snapshot())
    assert result.fallback_code == FALLBACK_PROMISES_UNPLACED
    assert "could not be placed" in result.fallback_reason
    assert started(result) == {"long"}  # plain EASY's, as before


def test_without_the_book_the_fallback_is_plain_easy() -> None:
    result = run_decision(snapshot(), pb.DISPATCHER_PCP20, Tenth(),
                          SearchControl(dataclasses.replace(PROFILES["qos"][0]),
                                        time.monotonic() + 30),
                          dispatchers={**DISPATCHERS, pb.DISPATCHER_PCP20: Failing("raises")})
    assert result.fallback_code == FALLBACK_DISPATCHER_ERROR
    assert started(result) == {"long"}
