"""The decision front (server/rpc/decision_front.py) both servicers decide through: a snapshot
taken in and a situation built for the predictor are decided, counted and answered alike; a
decision whose slot is already over is abandoned before anything is predicted."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from hpcdispatch.proto_convert import snapshot_to_pb
from hpcdispatch.server.config import ServerConfig
from hpcdispatch.server.domain.duration_predictor import DurationPredictor
from hpcdispatch.server.intake.snapshot_intake import SnapshotIntake
from hpcdispatch.server.pipeline import DecisionAbandoned, Situation
from hpcdispatch.server.predictors.registry import PredictorRegistry
from hpcdispatch.server.rpc.decision_front import DecisionFront, DecisionSlot
from hpcdispatch.server.rpc.metrics import ServiceMetrics
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import PRESETS
from hpcdispatch.v1 import dispatcher_pb2 as pb


@pytest.fixture
def front() -> Iterator[DecisionFront]:
    with PredictorRegistry() as registry:
        yield DecisionFront(ServerConfig(), registry, ServiceMetrics(CollectorRegistry()))


def _slot(seconds: float, cancelled: bool = False) -> DecisionSlot:
    return DecisionSlot(pb.DISPATCHER_EASY, time.monotonic() + seconds, lambda: cancelled)


def _decisions(front: DecisionFront) -> float:
    """Decisions the front's metrics counted (hpcdispatch_decisions_total, all labels)."""
    return sum(s.value for metric in front.metrics.decisions.collect()
               for s in metric.samples if s.name.endswith("_total"))


def test_a_given_and_a_built_situation_are_decided_and_counted_alike(
    front: DecisionFront,
) -> None:
    request = snapshot_to_pb(synthetic_snapshot(PRESETS["eurora"], 12, 0.5, seed=5))
    request.predictor = pb.PREDICTOR_WALLTIME
    intake = SnapshotIntake(front.config, front.predictors.kinds).dispatch(request)
    assert intake.violations == [] and intake.snapshot is not None
    assert intake.nodes is not None and intake.options is not None
    given = Situation(intake.snapshot, intake.nodes)
    asked: list[int] = []

    def build(kind: int, predictor: DurationPredictor) -> Situation:
        asked.append(kind)
        return given

    first = front.decide(given, intake.options, _slot(30), time.monotonic())
    second = front.decide_built(build, intake.options, _slot(30), time.monotonic())
    assert asked == [pb.PREDICTOR_WALLTIME]
    assert list(first.response.starts) == list(second.response.starts)
    assert first.response.starts, "the instance starts something"
    assert first.response.report.profile == second.response.report.profile == "book"  # default
    assert first.predictor == second.predictor == pb.PREDICTOR_WALLTIME
    assert _decisions(front) == 2


@pytest.mark.parametrize("cancelled", [False, True])
def test_a_decision_whose_slot_is_over_is_abandoned_before_the_predictor(
    front: DecisionFront, cancelled: bool,
) -> None:
    request = snapshot_to_pb(synthetic_snapshot(PRESETS["eurora"], 4, 0.5, seed=1))
    intake = SnapshotIntake(front.config, front.predictors.kinds).dispatch(request)
    assert intake.snapshot is not None and intake.nodes is not None
    assert intake.options is not None
    slot = _slot(30, cancelled=True) if cancelled else _slot(-1)
    assert slot.stopped()
    with pytest.raises(DecisionAbandoned) as abandoned:
        front.decide(Situation(intake.snapshot, intake.nodes), intake.options, slot,
                     time.monotonic())
    assert abandoned.value.stage == "convert" and abandoned.value.cancelled == cancelled
    assert not _slot(30).stopped()
    assert _decisions(front) == 0
