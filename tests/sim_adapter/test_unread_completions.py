"""A replay through its own service reports completions only where its predictor reads them.

The embedded service is the replay's alone (its knowledge base and metrics end with it), so a
replay under walltime or oracle, whose d_i depends on the job alone, reports nothing there, as
the in-process path does not; under last-two it reports, and through a service that is not
its own (`--target`: others may watch its predictor-error metrics) it reports whatever the
predictor. Counted on a real server's /metrics: the session stream's report_completions
messages; the decisions are the same either way (jobs.csv byte for byte)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hpcdispatch.server.rpc.app import RunningServer
from hpcdispatch.sim_adapter.adapter import DispatchSettings
from hpcdispatch.sim_adapter.replay import RunSpec, bundled_trace, replay
from tests.observability import metrics_server, scrape_text, value

JOBS = 80
REPORTS = "hpcdispatch_session_stream_messages_total"


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with metrics_server() as running:
        yield running


def reports_of(server: RunningServer, out: Path, predictor: str, own_service: bool) -> float:
    """The report_completions messages the server answered during one replay."""
    assert server.metrics_port is not None
    before = value(scrape_text(server.metrics_port), REPORTS, call="report_completions",
                   grpc_code="OK")
    spec = RunSpec(bundled_trace(), DispatchSettings(dispatcher="easy", predictor=predictor),
                   limit_jobs=JOBS, own_service=own_service)
    replay(spec, server.target, out)
    return value(scrape_text(server.metrics_port), REPORTS, call="report_completions",
                 grpc_code="OK") - before


def test_its_own_service_hears_no_completions_a_walltime_replay_does_not_read(
        server: RunningServer, tmp_path: Path) -> None:
    assert reports_of(server, tmp_path / "own", "walltime", own_service=True) == 0
    assert reports_of(server, tmp_path / "shared", "walltime", own_service=False) > 0
    own, shared = tmp_path / "own" / "jobs.csv", tmp_path / "shared" / "jobs.csv"
    assert own.read_bytes() == shared.read_bytes()


def test_a_predictor_that_learns_hears_every_completion(server: RunningServer,
                                                        tmp_path: Path) -> None:
    assert reports_of(server, tmp_path / "l", "last-two", own_service=True) > 0
