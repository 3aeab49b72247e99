"""The pipeline's guard (issue #49): a dispatcher's decision that starts nothing where a queued
job fits now, on an idle system or cut short by the deadline (status UNKNOWN), is replaced by
EASY's, counted as a fallback (`started_nothing`). A decision that starts nothing on a busy
system, decided in full, stands: waiting for a promise's room is a dispatcher's right."""

from __future__ import annotations

import time

import pytest

from hpcdispatch.decision_check import check_decision
from hpcdispatch.server.dispatchers import DISPATCHERS
from hpcdispatch.server.dispatchers.base import Outcome, SearchControl
from hpcdispatch.server.dispatchers.planning.problem import Problem
from hpcdispatch.server.domain.outcome_kinds import SolveStatus
from hpcdispatch.server.pipeline import FALLBACK_STARTED_NOTHING, run_decision
from hpcdispatch.server.predictors.walltime import WalltimePredictor
from hpcdispatch.snapshot import Snapshot
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.instances import FAST, T, node, queued, running


class StartsNothing:
    """A stand-in for PCP'20 that starts nothing, with the given status."""

    name = "nothing"

    def __init__(self, status: SolveStatus) -> None:
        self.status = status

    def decide(self, problem: Problem, control: SearchControl) -> Outcome:
        return Outcome(placements={}, status=self.status)


def decide(snapshot: Snapshot, status: SolveStatus) -> tuple[str, Outcome, set[str]]:
    dispatchers = {**DISPATCHERS, pb.DISPATCHER_PCP20: StartsNothing(status)}
    result = run_decision(snapshot, pb.DISPATCHER_PCP20, WalltimePredictor(),
                          SearchControl(FAST, time.monotonic() + 30),
                          dispatchers=dispatchers)  # type: ignore[arg-type]
    assert check_decision(snapshot, result.decision) == []
    return result.fallback_code, result.outcome, {s.job_id for s in result.decision.starts}


IDLE = Snapshot(T, (node(1), node(2)), (), (queued("wide", 4, 50, units=3),
                                            queued("small", 2, 30)))
BUSY = Snapshot(T, (node(1), node(2)), (running("r", "n1", 2, 100),),
                (queued("a", 2, 50), queued("b", 4, 30)))


@pytest.mark.parametrize("status", [SolveStatus.EMPTY, SolveStatus.OPTIMAL])
def test_an_idle_system_left_idle_gets_easys_decision(status: SolveStatus) -> None:
    code, outcome, started = decide(IDLE, status)
    assert code == FALLBACK_STARTED_NOTHING
    assert outcome.status == SolveStatus.FALLBACK and started == {"small"}


def test_a_decision_cut_short_gets_easys_decision() -> None:
    code, _, started = decide(BUSY, SolveStatus.UNKNOWN)
    assert code == FALLBACK_STARTED_NOTHING and started == {"a", "b"}  # as EASY starts them


def test_a_busy_system_decided_in_full_may_start_nothing() -> None:
    code, _, started = decide(BUSY, SolveStatus.OPTIMAL)
    assert code == "" and started == set()


def test_an_idle_system_where_nothing_fits_is_no_fallback() -> None:
    code, _, started = decide(Snapshot(T, (node(1),), (), (queued("big", 8, 10),)),
                              SolveStatus.EMPTY)
    assert code == "" and started == set()
