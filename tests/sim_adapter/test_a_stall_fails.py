"""A replay that stalls is a failure, not a message (issue #49): a service that starts nothing on
an idle system, decision after decision, makes `replay` raise SimulationError (so a test that
replays fails) and `hpcdispatch simulate` exit 1 with the reason on stderr, never 0. The
service here is a stand-in backend (the real pipeline would replace such a decision by EASY's:
tests/server/pipeline/test_never_empty_handed.py)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from hpcdispatch.cli import main
from hpcdispatch.sim_adapter.adapter import DispatchSettings
from hpcdispatch.sim_adapter.backend import Answer, AnswerReport, StateChange
from hpcdispatch.sim_adapter.in_process_backend import LocalService
from hpcdispatch.sim_adapter.replay import RunSpec, bundled_trace, replay
from hpcdispatch.sim_adapter.simulator import SimulationError
from hpcdispatch.snapshot import Decision, JobCompletion, Snapshot
from hpcdispatch.v1 import dispatcher_pb2 as pb


class StartsNothing:
    """A backend whose every decision starts nothing."""

    checks_decisions = True

    def __init__(self, template: pb.DispatchRequest) -> None:
        self.calls = 0

    def decide(self, change: StateChange, whole: Callable[[], Snapshot]) -> Answer:
        self.calls += 1
        return Answer(Decision(change.time), AnswerReport.of(
            pb.DISPATCHER_FCFS, pb.PREDICTOR_WALLTIME, "", 0, pb.SOLVE_STATUS_HEURISTIC, 0, 0,
            0.0, "", "fcfs", "walltime"))

    def report_completions(self, completions: Sequence[JobCompletion]) -> None:
        pass

    def close(self) -> None:
        pass


class IdleService(LocalService):
    def backend(self, template: pb.DispatchRequest) -> StartsNothing:  # type: ignore[override]
        return StartsNothing(template)


def test_a_stalled_replay_raises(tmp_path: Path) -> None:
    spec = RunSpec(bundled_trace(), DispatchSettings(dispatcher="fcfs", predictor="walltime"),
                   limit_jobs=20)
    with pytest.raises(SimulationError, match=r"stalled at t=.*on an idle system"):
        replay(spec, IdleService(), tmp_path)


def test_a_stalled_simulate_exits_1_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(LocalService, "backend", IdleService.backend)
    code = main(["simulate", "--trace", str(bundled_trace()), "--records", "0:20",
                 "--dispatcher", "fcfs", "--predictor", "walltime", "--in-process",
                 "--out", str(tmp_path / "run")])
    assert code == 1
    assert "stalled at t=" in capsys.readouterr().err
