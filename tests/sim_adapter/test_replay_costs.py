"""What a replay does not pay for (issue #52): modules an in-process replay never loads, and
the simulator's second check of a decision its own service already checked in this process.

Events, not times: the modules a fresh interpreter holds after an in-process replay
(`sys.modules`), and how many decisions the simulator checks itself.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from hpcdispatch.client import DispatcherClient
from hpcdispatch.decision_check import check_decision_against
from hpcdispatch.server.domain.lazy_logger import LazyLogger
from hpcdispatch.sim_adapter import simulator as simulator_module
from hpcdispatch.sim_adapter.adapter import DispatchSettings
from hpcdispatch.sim_adapter.outputs import RunRecorder
from hpcdispatch.sim_adapter.replay import bundled_trace
from hpcdispatch.sim_adapter.simulator import ReplayOptions, Simulator
from hpcdispatch.sim_adapter.stream_backend import StreamBackend
from hpcdispatch.sim_adapter.swf import CleaningStats, iter_jobs, read_header
from hpcdispatch.sim_adapter.workload import rule_for_system, system_from_header
from tests.paths import ROOT
from tests.processes import quiet_embedded_service

# What only the gRPC paths, the logs of a failure, or a progress bar need.
NOT_LOADED = ("grpc", "structlog", "rich", "tqdm", "hpcdispatch.client",
              "google.protobuf.json_format", "ortools", "pandas")
REPLAY = """
import json, sys
from hpcdispatch.cli import main
code = main(["simulate", "--in-process", "--dispatcher", "easy", "--predictor", "walltime",
             "--records", "0:20", "--no-progress", "--out", sys.argv[1]])
assert code == 0, code
print(json.dumps(sorted(m for m in sys.modules)))
"""
JOBS = 60


def loaded_after_replay(out: Path) -> set[str]:
    """The modules a fresh interpreter holds after an in-process EASY replay into `out`."""
    done = subprocess.run([sys.executable, "-c", REPLAY, str(out)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.timeout(300)
def test_an_easy_replay_in_process_loads_no_wire_no_logging_no_bar(tmp_path: Path) -> None:
    loaded = loaded_after_replay(tmp_path / "replay")
    assert (tmp_path / "replay").is_dir()
    assert loaded.isdisjoint(NOT_LOADED), sorted(loaded.intersection(NOT_LOADED))
    assert "hpcdispatch.server.pipeline" in loaded  # it did decide through the pipeline


def test_the_lazy_logger_logs_what_structlog_would() -> None:
    """The core's loggers bind structlog when they first log, with its configuration then."""
    log = LazyLogger("hpcdispatch.pipeline")
    with capture_logs() as lines:
        log.error("fallback decision failed the check", dispatcher="easy")
        log.warning("again")
    assert lines == [
        {"event": "fallback decision failed the check", "dispatcher": "easy",
         "log_level": "error"},
        {"event": "again", "log_level": "warning"},
    ]


@pytest.fixture(scope="module")
def target() -> Iterator[str]:
    with quiet_embedded_service() as address:
        yield address


def _replay(target: str, own_service: bool, out: Path) -> int:
    trace = bundled_trace()
    system = system_from_header(read_header(trace), "kth")
    template = DispatchSettings(dispatcher="easy", predictor="walltime").template()
    recorder = RunRecorder(out)
    with DispatcherClient(target, timeout=120) as client:
        backend = StreamBackend(client, template, 120.0, own_service=own_service)
        simulator = Simulator(system, rule_for_system(system, "node", 1.0, 0.0), backend,
                              recorder, ReplayOptions())
        try:
            result = simulator.run(iter_jobs(trace, CleaningStats(), JOBS))
        finally:
            recorder.close()
            backend.close()
    assert result.jobs == JOBS
    return result.decisions


def test_a_stream_to_its_own_service_is_checked_there_once(
    target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through a service that is not the replay's own, the simulator checks every decision
    again; through its own (the embedded one, whose pipeline checked it in this process
    against the state the simulator's changes made) it does not; the replays are the same."""
    checked: list[int] = []

    def counting(facts, decision, *args, **kwargs):  # type: ignore[no-untyped-def]
        checked.append(decision.time)
        return check_decision_against(facts, decision, *args, **kwargs)

    monkeypatch.setattr(simulator_module, "check_decision_against", counting)
    shared = _replay(target, False, tmp_path / "shared")
    assert len(checked) == shared > 0
    checked.clear()
    own = _replay(target, True, tmp_path / "own")
    assert checked == [] and own == shared

    def rows(run: Path) -> list[dict[str, str]]:
        with (run / "jobs.csv").open(newline="") as handle:
            return list(csv.DictReader(handle))

    assert rows(tmp_path / "own") == rows(tmp_path / "shared")
