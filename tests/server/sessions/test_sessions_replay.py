"""Replays of the bundled KTH-SP2 slice through sessions and through full snapshots.

Equivalence: the same replay gives the same decisions either way (EASY and FCFS are
deterministic, with the requested time as d_i). Fault: the server process is killed in the middle
of a replay and started again on the same port; the client resyncs, every decision is checked by
the simulator, and the replay ends with the same jobs at the same times as an uninterrupted one.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from hpcdispatch.client import DispatcherClient
from hpcdispatch.sim_adapter.adapter import DispatchSettings, GrpcBackend, service_target
from hpcdispatch.sim_adapter.backend import Answer, DispatchBackend, StateChange
from hpcdispatch.sim_adapter.outputs import RunRecorder
from hpcdispatch.sim_adapter.replay import RunSpec, bundled_trace, replay
from hpcdispatch.sim_adapter.simulator import ReplayOptions, Simulator
from hpcdispatch.sim_adapter.stream_backend import StreamBackend
from hpcdispatch.sim_adapter.swf import CleaningStats, iter_jobs, read_header
from hpcdispatch.sim_adapter.workload import rule_for_system, system_from_header
from hpcdispatch.snapshot import JobCompletion, Snapshot
from tests.observability import free_port
from tests.processes import stop_process

LIMIT = 300  # jobs of the bundled slice per replay


@pytest.fixture(scope="module")
def target() -> Iterator[str]:
    with service_target(None) as address:
        yield address


def jobs_csv(path: Path) -> list[dict[str, str]]:
    with (path / "jobs.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize("dispatcher", ["easy", "fcfs"])
def test_sessions_and_full_snapshots_give_the_same_replay(
    target: str, tmp_path: Path, dispatcher: str,
) -> None:
    settings = DispatchSettings(dispatcher=dispatcher, predictor="walltime")
    runs = {}
    for name, full in (("sessions", False), ("full", True)):
        spec = RunSpec(bundled_trace(), settings, limit_jobs=LIMIT, full_snapshots=full)
        runs[name] = replay(spec, target, tmp_path / name)
    assert runs["sessions"]["jobs"] == LIMIT
    assert runs["sessions"]["decisions"] == runs["full"]["decisions"] > 50
    assert jobs_csv(tmp_path / "sessions") == jobs_csv(tmp_path / "full")


class _ServerProcess:
    """`hpcdispatch serve` on a fixed port, killed with SIGKILL and started again."""

    def __init__(self, port: int, log_dir: Path) -> None:
        self.port = port
        self.log_dir = log_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        # The log goes to a file: a pipe nobody reads would block the server once full.
        log = self.log_dir / f"server-{self.starts + 1}.log"
        env = {**os.environ, "HPCDISPATCH_LOG_FORMAT": "json", "HPCDISPATCH_LOG_LEVEL": "info"}
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "hpcdispatch", "serve", "--listen",
                 f"127.0.0.1:{self.port}"], env=env, stdout=out, stderr=subprocess.STDOUT)
        give_up = time.monotonic() + 60
        while '"serving"' not in log.read_text():
            assert self.proc.poll() is None and time.monotonic() < give_up, log.read_text()
            time.sleep(0.1)
        self.starts += 1

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            stop_process(self.proc, 10)


TEMPLATE = DispatchSettings(dispatcher="easy", predictor="walltime").template()


class _KillingBackend:
    """`inner`, but the server is killed before decision number `at`, and started again a
    moment later."""

    def __init__(self, inner: GrpcBackend, server: _ServerProcess, at: int) -> None:
        self.inner = inner
        self.server = server
        self.at = at
        self.calls = 0

    def decide(self, change: StateChange, whole: Callable[[], Snapshot]) -> Answer:
        self.calls += 1
        if self.calls == self.at:
            self.server.kill()
            time.sleep(0.5)  # the call below meets a closed port first, then the new server
            self.server.start()
        return self.inner.decide(change, whole)

    def report_completions(self, completions: Sequence[JobCompletion]) -> None:
        self.inner.report_completions(completions)


def _simulate(backend: DispatchBackend, out: Path) -> tuple[int, int]:
    trace = bundled_trace()
    header = read_header(trace)
    system = system_from_header(header, "kth")
    rule = rule_for_system(system, "node", 1.0, 0.0)
    recorder = RunRecorder(out)
    simulator = Simulator(system, rule, backend, recorder, ReplayOptions())
    try:
        result = simulator.run(iter_jobs(trace, CleaningStats(), LIMIT))
    finally:
        recorder.close()
    return result.jobs, result.decisions


@pytest.mark.parametrize("transport", ["unary", "stream"])
def test_a_replay_survives_the_server_being_killed_and_restarted(
    tmp_path: Path, transport: str,
) -> None:
    server = _ServerProcess(free_port(), tmp_path)
    server.start()
    try:
        with DispatcherClient(f"127.0.0.1:{server.port}", timeout=60, retries=5,
                              max_backoff=1.0) as client:
            inner = (StreamBackend(client, TEMPLATE, timeout=60.0) if transport == "stream"
                     else GrpcBackend(client, TEMPLATE, timeout=60.0))
            backend = _KillingBackend(inner, server, at=40)
            jobs, decisions = _simulate(backend, tmp_path / "killed")
            session = inner.session
            assert server.starts == 2 and session is not None
            assert session.resyncs >= 1
            assert session.reasons.keys() <= {"SERVER_RESTARTED", "UNKNOWN_SESSION"}
            assert session.deltas > decisions / 2
            if transport == "stream":  # the broken stream was replaced, the calls not unary
                assert session.stream is not None and session.stream.streams >= 2
            reference = GrpcBackend(client, TEMPLATE, timeout=60.0, full_snapshots=True)
            ref_jobs, ref_decisions = _simulate(reference, tmp_path / "reference")
    finally:
        server.stop()
    assert jobs == ref_jobs == LIMIT and decisions == ref_decisions
    # Every decision was checked by the simulator (it raises InvalidDecisionError otherwise).
    assert jobs_csv(tmp_path / "killed") == jobs_csv(tmp_path / "reference")
