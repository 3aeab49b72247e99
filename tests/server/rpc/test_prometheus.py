"""A real Prometheus (Debian's package) scrapes a real server under a short load.

The test installs `prometheus` with apt-get when it is missing (root) and skips with the reason
when it cannot. Prometheus listens on loopback on a free port, keeps its data in a temporary
folder, scrapes every second, and is stopped by its pid at the end.
"""

from __future__ import annotations

import json
import math
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from hpcdispatch.client import DispatcherClient
from hpcdispatch.server.rpc.app import RunningServer
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.observability import (
    dashboard_queries,
    ensure_prometheus,
    free_port,
    metrics_server,
    small_request,
    substitute_grafana_variables,
)
from tests.paths import ROOT
from tests.processes import stop_process

CALLS = 20
DASHBOARD = ROOT / "deploy/grafana/dashboards/hpcdispatch.json"


class Prometheus:
    """Prometheus' HTTP API."""

    def __init__(self, url: str) -> None:
        self.url = url

    def get(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=60) as reply:
                return json.loads(reply.read())
        except urllib.error.HTTPError as exc:  # Prometheus explains bad queries in the body
            raise AssertionError(f"{path} {params}: {exc.code} {exc.read().decode()}") from None

    def query(self, expr: str) -> list[dict[str, Any]]:
        answer = self.get("/api/v1/query", query=expr)
        assert answer["status"] == "success", (expr, answer)
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def scalar(self, expr: str) -> float:
        """The value of a one-series expression (NaN when there is no series)."""
        result = self.query(expr)
        assert len(result) <= 1, (expr, result)
        return float(result[0]["value"][1]) if result else math.nan

    def wait_for(self, expr: str, expected: float, timeout: float = 120.0) -> float:
        deadline = time.monotonic() + timeout
        while True:
            got = self.scalar(expr)
            if got == expected or time.monotonic() > deadline:
                return got
            time.sleep(0.25)


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with metrics_server() as running:
        yield running


@pytest.fixture(scope="module")
def prometheus(server: RunningServer, tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[Prometheus]:
    binary = ensure_prometheus()
    folder = tmp_path_factory.mktemp("prometheus")
    config = folder / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: hpcdispatch\n    static_configs:\n"
        f"      - targets: ['127.0.0.1:{server.metrics_port}']\n"
    )
    port = free_port()
    proc = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={folder / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=(folder / "prometheus.log").open("w"),
    )
    api = Prometheus(f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 120  # a hang guard, not a timing
        while True:
            if proc.poll() is not None:
                pytest.fail(f"prometheus exited: {(folder / 'prometheus.log').read_text()}")
            try:
                if api.scalar('up{job="hpcdispatch"}') == 1:
                    break
            except (OSError, AssertionError):  # not ready yet
                pass
            if time.monotonic() > deadline:
                pytest.fail("prometheus did not scrape the server within 120 s")
            time.sleep(0.25)
        yield api
    finally:
        stop_process(proc, 15)


@pytest.fixture(scope="module")
def load(server: RunningServer, prometheus: Prometheus) -> dict[str, float]:
    """CALLS decisions, one invalid snapshot, completions for the first decision's starts."""
    totals = {"seconds": 0.0, "started": 0.0, "completions": 0.0}
    with DispatcherClient(server.target, timeout=30) as client:
        first: tuple[pb.DispatchRequest, pb.DispatchResponse] | None = None
        for i in range(CALLS):
            request = small_request(seed=i)
            response = client.dispatch(request)
            totals["seconds"] += response.report.total_seconds
            totals["started"] += len(response.starts)
            first = first or (request, response)
        bad = small_request()
        bad.queued_jobs[0].units = 0
        with pytest.raises(grpc.RpcError):
            client.dispatch(bad)
        assert first is not None
        request, response = first
        completions = [
            pb.JobCompletion(job_id=s.job_id, user="u", units=len(s.units),
                             unit_request=dict(s.units[0].amounts), requested_time=3600,
                             start_time=request.time, end_time=request.time + 120)
            for s in response.starts
        ]
        client.report_completions(completions)
        totals["completions"] = len(completions)
    # Wait until a scrape after the last call has landed.
    got = prometheus.wait_for(
        'sum(grpc_server_handled_total{grpc_method="ReportCompletions"})', 1)
    assert got == 1, "the last call never showed up in Prometheus"
    # rate() needs two samples of a series in its window: wait until every series, also
    # those the last calls created, has been scraped three times.
    deadline = time.monotonic() + 120
    newest_series = ("grpc_server_handled_total",
                     "hpcdispatch_predictor_absolute_error_seconds_count")
    for newest in newest_series:
        while (prometheus.scalar(f"min(count_over_time({newest}[1m]))") < 3
               and time.monotonic() < deadline):
            time.sleep(0.25)
    return totals


def test_counts_match_the_calls(prometheus: Prometheus, load: dict[str, float]) -> None:
    handled = 'sum(grpc_server_handled_total{grpc_method="Dispatch", grpc_code="%s"})'
    assert prometheus.scalar(handled % "OK") == CALLS
    assert prometheus.scalar(handled % "InvalidArgument") == 1
    assert prometheus.scalar(
        'sum(grpc_server_started_total{grpc_service="hpcdispatch.v1.DispatcherService",'
        ' grpc_method="Dispatch", grpc_type="unary"})') == CALLS + 1
    assert prometheus.scalar("sum(hpcdispatch_decisions_total)") == CALLS
    assert prometheus.scalar("sum(hpcdispatch_decision_seconds_count)") == CALLS
    assert prometheus.scalar("sum(hpcdispatch_jobs_started_total)") == load["started"] > 0
    assert prometheus.scalar("hpcdispatch_queue_depth") == len(small_request().queued_jobs)
    assert prometheus.scalar(
        "sum(hpcdispatch_predictor_absolute_error_seconds_count)") == load["completions"] > 0


def test_histograms_have_plausible_values(prometheus: Prometheus, load: dict[str, float]) -> None:
    total = prometheus.scalar("sum(hpcdispatch_decision_seconds_sum)")
    assert total == pytest.approx(load["seconds"], rel=1e-6) and total > 0
    assert prometheus.scalar("sum(hpcdispatch_decision_build_seconds_sum)") > 0
    assert prometheus.scalar("sum(grpc_server_handling_seconds_sum)") >= total
    p90 = prometheus.scalar(
        "histogram_quantile(0.9, sum by (le) (hpcdispatch_decision_seconds_bucket))")
    assert 0.001 <= p90 <= 60
    attempts = prometheus.scalar("sum(hpcdispatch_decision_attempts_count)")
    assert attempts == CALLS
    statuses = prometheus.query("sum by (status) (hpcdispatch_decisions_total)")
    assert sum(float(s["value"][1]) for s in statuses) == CALLS
    assert all(s["metric"]["status"] != "unspecified" for s in statuses)


def test_every_dashboard_query_runs(prometheus: Prometheus, load: dict[str, float]) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    empty = []
    for expr in dashboard_queries(dashboard):
        query = substitute_grafana_variables(expr, "30s")
        assert "$" not in query, query
        if not prometheus.query(query):
            empty.append(query)
    # Only the panels of things that did not happen (fallbacks, failed checks, promises: no
    # decision of this load makes one; tests/server/rpc/test_promise_metrics.py asks those
    # panels after promise decisions) may be empty.
    # (the likely start's error is observed when a promised job starts)
    assert all("fallback" in e or "check_failures" in e or "promise" in e
               or "likely_start" in e for e in empty), empty
    assert len([e for e in empty if "promise" not in e and "likely_start" not in e]) <= 2
