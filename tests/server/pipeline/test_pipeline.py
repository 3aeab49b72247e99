"""The decision pipeline the service runs, called directly (no wire in between)."""

from __future__ import annotations

import time
from collections.abc import Sequence

import grpc
import pytest

from hpcdispatch.decision_check import check_decision
from hpcdispatch.proto_convert import decision_from_pb, snapshot_to_pb
from hpcdispatch.server.dispatchers import DISPATCHERS
from hpcdispatch.server.dispatchers.base import Outcome, SearchControl
from hpcdispatch.server.dispatchers.planning.problem import Problem
from hpcdispatch.server.domain.duration_predictor import Completion, JobFacts
from hpcdispatch.server.domain.outcome_kinds import SolveStatus
from hpcdispatch.server.pipeline import (
    FALLBACK_CHECK_FAILED,
    FALLBACK_DISPATCHER_ERROR,
    DecisionAbandoned,
    predict_durations,
    run_decision,
)
from hpcdispatch.server.predictors.walltime import WalltimePredictor
from hpcdispatch.server.rpc.app import ServerConfig, start_server
from hpcdispatch.server.rpc.decision_front import DecisionSlot
from hpcdispatch.snapshot import RunningJob, Snapshot, UnitAllocation
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import PRESETS
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc
from tests.instances import FAST, Crashing, OverAllocating, T, node, queued, running


def _control(cancelled: bool = False, seconds: float = 30.0) -> SearchControl:
    return SearchControl(FAST, time.monotonic() + seconds, cancelled=lambda: cancelled)


def _small() -> Snapshot:
    return Snapshot(
        T, (node(1), node(2)), (running("r", "n1", 2, 100),),
        (queued("a", 2, 50), queued("b", 4, 30), queued("c", 1, 10)),
    )


class CountingPredictor:
    """Half the requested time; counts calls to see that predictions are batched."""

    name = "counting"

    def __init__(self) -> None:
        self.batches: list[int] = []
        self.single = 0

    def predict(self, job: JobFacts) -> int:
        self.single += 1
        return max(1, job.requested_time // 2)

    def predict_many(self, jobs: Sequence[JobFacts]) -> list[int]:
        self.batches.append(len(jobs))
        return [max(1, j.requested_time // 2) for j in jobs]

    def learn(self, completion: Completion) -> None:
        return None


def test_predictions_are_one_batch_per_kind_of_job() -> None:
    snapshot = _small()
    unknown = RunningJob("u", "x", "y", T - 10, 400, None, (UnitAllocation("n2", {"core": 1}),))
    snapshot = Snapshot(T, snapshot.nodes, (*snapshot.running, unknown), snapshot.queued)
    predictor = CountingPredictor()
    durations = predict_durations(snapshot, predictor)
    assert predictor.batches == [3, 1] and predictor.single == 0
    assert durations.queued == {"a": 25, "b": 15, "c": 5}
    assert durations.running == {"r": 110, "u": 200}  # r: the caller's expected_duration


def test_a_running_job_past_its_prediction_is_expected_to_run_to_its_requested_time() -> None:
    late = RunningJob("late", "x", "y", T - 500, 3600, 100, (UnitAllocation("n1", {"core": 4}),))
    snapshot = Snapshot(T, (node(1),), (late,), (queued("a", 4, 10),))
    durations = predict_durations(snapshot, WalltimePredictor())
    assert durations.running["late"] == 3600
    result = run_decision(snapshot, pb.DISPATCHER_EASY, WalltimePredictor(), _control())
    # n1 is busy until T - 500 + 3600 in the model, not "one second from now".
    assert result.problem.blocks[0].end == 3100
    assert result.decision.starts == []


@pytest.mark.parametrize(
    ("kind", "stand_in", "code"),
    [(pb.DISPATCHER_FCFS, OverAllocating(), FALLBACK_CHECK_FAILED),
     (pb.DISPATCHER_HCP19, Crashing(), FALLBACK_DISPATCHER_ERROR)],
)
def test_a_wrong_or_crashing_dispatcher_is_replaced_by_the_checked_fallback(
    kind: int, stand_in: object, code: str
) -> None:
    dispatchers = {**DISPATCHERS, kind: stand_in}
    snapshot = _small()
    result = run_decision(snapshot, kind, WalltimePredictor(), _control(),
                          dispatchers=dispatchers)  # type: ignore[arg-type]
    assert result.fallback_code == code and result.fallback_reason
    assert result.outcome.status == SolveStatus.FALLBACK
    assert result.decision.starts and check_decision(snapshot, result.decision) == []
    assert result.check_failures == ([kind] if code == FALLBACK_CHECK_FAILED else [])


def test_a_wrong_fallback_starts_nothing() -> None:
    dispatchers = {**DISPATCHERS, pb.DISPATCHER_EASY: OverAllocating()}
    result = run_decision(_small(), pb.DISPATCHER_EASY, WalltimePredictor(), _control(),
                          dispatchers=dispatchers)  # type: ignore[arg-type]
    assert result.decision.starts == []
    assert result.check_failures == [pb.DISPATCHER_EASY, pb.DISPATCHER_EASY]


@pytest.mark.parametrize("cancelled", [True, False])
def test_no_work_starts_for_a_caller_that_is_gone_or_out_of_time(cancelled: bool) -> None:
    predictor = CountingPredictor()
    control = _control(cancelled=cancelled, seconds=30.0 if cancelled else -0.001)
    with pytest.raises(DecisionAbandoned) as raised:
        run_decision(_small(), pb.DISPATCHER_PCP20, predictor, control)
    assert raised.value.stage == "predict" and raised.value.cancelled is cancelled
    assert predictor.batches == []


class CancelsWhileDeciding:
    """Decides like EASY, but its caller hangs up meanwhile."""

    name = "cancels"
    kind = pb.DISPATCHER_EASY

    def __init__(self, flag: list[bool]) -> None:
        self.flag = flag

    def decide(self, problem: Problem, control: SearchControl) -> Outcome:
        self.flag.append(True)
        return DISPATCHERS[pb.DISPATCHER_EASY].decide(problem, control)


def test_a_decision_whose_caller_left_during_the_search_is_not_checked_nor_answered() -> None:
    flag: list[bool] = []
    control = SearchControl(FAST, time.monotonic() + 30, cancelled=lambda: bool(flag))
    dispatchers = {**DISPATCHERS, pb.DISPATCHER_HCP19: CancelsWhileDeciding(flag)}
    with pytest.raises(DecisionAbandoned) as raised:
        run_decision(_small(), pb.DISPATCHER_HCP19, WalltimePredictor(), control,
                     dispatchers=dispatchers)  # type: ignore[arg-type]
    assert raised.value.stage == "check"


@pytest.mark.parametrize("kind", [pb.DISPATCHER_FCFS, pb.DISPATCHER_EASY])
def test_the_service_answers_what_the_pipeline_decides(kind: int) -> None:
    """Deterministic dispatchers: the same snapshot through gRPC and through run_decision."""
    snapshot = synthetic_snapshot(PRESETS["eurora"], queued=60, busy=0.3, seed=3)
    direct = run_decision(snapshot, kind, WalltimePredictor(), _control())
    running = start_server(ServerConfig(listen="127.0.0.1:0", default_predictor="walltime"))
    try:
        with grpc.insecure_channel(running.target) as channel:
            request = snapshot_to_pb(snapshot, pb.DispatchRequest(dispatcher=kind))  # type: ignore[arg-type]
            response = pb_grpc.DispatcherServiceStub(channel).Dispatch(request, timeout=30)
    finally:
        running.stop(0)
    served = decision_from_pb(response)
    assert direct.decision.starts  # something to compare
    assert sorted(served.starts, key=lambda s: s.job_id) == sorted(
        direct.decision.starts, key=lambda s: s.job_id)


class _CallerWithDeadline:
    """The part of a grpc.ServicerContext a decision slot reads: the time the caller left."""

    def __init__(self, left: float) -> None:
        self.left = left

    def time_remaining(self) -> float:
        return self.left

    def is_active(self) -> bool:
        return True


@pytest.mark.parametrize(("left", "budget"), [(0.1, 0.05), (0.18, 0.09), (1.0, 0.8),
                                              (30.0, 27.0)])
def test_a_short_deadline_still_leaves_the_decision_time(left: float, budget: float) -> None:
    """The margin kept back from a caller's deadline is at most half of it: a plugin that gives
    180 ms gets half of it to decide (a fixed 200 ms margin refused every such call), a long
    deadline keeps back a tenth, at least DEADLINE_MARGIN_SECONDS."""
    received = 1000.0
    slot = DecisionSlot.of(pb.DISPATCHER_EASY, _CallerWithDeadline(left),  # type: ignore[arg-type]
                           received, max_seconds=3600)
    assert slot.deadline - received == pytest.approx(budget)
