"""The promise metrics (issue #42, item 4) after promise decisions over gRPC: kept and late
starts, moves later, pending promises, promises refused; then the same scraped by a real
Prometheus (Debian's package, as tests/server/rpc/test_prometheus.py runs it), the dashboard's
promise panels answering, and `promtool check metrics` finding nothing to say."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from typing import Any

import pytest

from hpcdispatch.client import DispatcherClient
from hpcdispatch.server.rpc.app import RunningServer
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.observability import (
    dashboard_queries,
    scrape_text,
    substitute_grafana_variables,
    value,
)
from tests.promise_cases import T, plan, promises, request
from tests.server.rpc import test_prometheus as scraped

# A real server with /metrics, and a Prometheus scraping it every second (module-scoped).
server = scraped.server
prometheus = scraped.prometheus
Prometheus = scraped.Prometheus


def promise_decisions(target: str, tag: str) -> dict[str, float]:
    """Three clusters: one whose A starts at its promise (kept), one where r runs past
    its requested time, A's promise moves later and A starts at the moved promise (late), and one
    sent a forged promise (refused). Returns what the metrics should say."""
    with DispatcherClient(target, timeout=60) as client:
        kept, late, forged = f"{tag}-kept", f"{tag}-late", f"{tag}-forged"
        client.dispatch(request(T, kept))
        ended = request(T + 1000, kept)
        del ended.running_jobs[:]
        on_time = client.dispatch(ended)
        assert plan(on_time)[0] == ["A"]
        client.dispatch(request(T, late))  # A promised r's requested end, T + 1,000
        # r runs past its requested time (the workload manager failed to stop it): expected to
        # end within a second, A's promise moves to T + 1,501 and B's (after A's) with it.
        moved = client.dispatch(request(T + 1500, late))
        assert promises(moved)["A"][0] == T + 1501
        ended = request(T + 1501, late, promises(moved))
        del ended.running_jobs[:]
        too_late = client.dispatch(ended)
        assert plan(too_late)[0] == ["A"]
        moves = [e.moved_later_seconds for answer in (moved, too_late)
                 for e in answer.report.expected_starts if e.moved_later_seconds]
        assert moves == [1, 501]  # A's promise was due: a second past now; B's behind it
        reasons = {e.move_reason for e in moved.report.expected_starts if e.moved_later_seconds}
        assert reasons == {pb.PROMISE_MOVE_REASON_RAN_PAST_LIMIT}
        refused = client.dispatch(request(T + 1, forged, {"B": (T + 1, "")}))
    return {"kept": 1, "late": 1, "moves": len(moves), "moved_seconds": sum(moves),
            "pending": len(promises(on_time)) + len(promises(too_late)) + len(
                promises(refused)), "refused": 1}


def test_the_promise_metrics_count_kept_late_moved_pending_and_refused(
    serve: Callable[..., RunningServer],
) -> None:
    running = serve()
    expected = promise_decisions(running.target, "exposition")
    text = running.metrics.exposition().decode()
    assert value(text, "hpcdispatch_promised_starts_total", outcome="kept",
                 dispatcher="pcp20") == expected["kept"]
    assert value(text, "hpcdispatch_promised_starts_total", outcome="late") == expected["late"]
    assert value(text, "hpcdispatch_promise_moved_later_seconds_count") == expected["moves"]
    assert value(text, "hpcdispatch_promise_moved_later_seconds_sum") == expected[
        "moved_seconds"]
    # A's move, 1 s (its promise was due: a second past now), falls in the bucket up to 1 min;
    # B's, 501 s (due at T + 2,000, it waits for A), in the one up to 15 min.
    assert [value(text, "hpcdispatch_promise_moved_later_seconds_bucket", le=le)
             for le in ("60.0", "300.0", "900.0")] == [1, 1, 2]
    assert value(text, "hpcdispatch_promises_pending") == expected["pending"] > 0
    assert value(text, "hpcdispatch_promises_refused_total", reason="missing") == 1


@pytest.fixture(scope="module")
def promise_load(server: RunningServer, prometheus: Any) -> dict[str, float]:
    expected = promise_decisions(server.target, "scraped")
    got = prometheus.wait_for("sum(hpcdispatch_promises_refused_total)", 1)
    assert got == 1, "the promise decisions never showed up in Prometheus"
    deadline = time.monotonic() + 120  # a hang guard: rate() needs samples in its window
    while (prometheus.scalar("min(count_over_time(hpcdispatch_promised_starts_total[1m]))") < 3
           and time.monotonic() < deadline):
        time.sleep(0.25)
    return expected


def test_a_real_prometheus_scrapes_the_promise_metrics(
    prometheus: Any, promise_load: dict[str, float],
) -> None:
    assert prometheus.scalar(
        'sum(hpcdispatch_promised_starts_total{outcome="kept"})') == promise_load["kept"]
    assert prometheus.scalar(
        'sum(hpcdispatch_promised_starts_total{outcome="late"})') == promise_load["late"]
    assert prometheus.scalar("sum(hpcdispatch_promise_moved_later_seconds_sum)") == (
        promise_load["moved_seconds"])
    assert prometheus.scalar("hpcdispatch_promises_pending") == promise_load["pending"]
    assert prometheus.scalar(
        'sum(hpcdispatch_promises_refused_total{reason="missing"})') == promise_load["refused"]


def test_the_dashboards_promise_panels_answer(
    prometheus: Any, promise_load: dict[str, float],
) -> None:
    dashboard = scraped.json.loads(scraped.DASHBOARD.read_text())
    panels = [p for p in dashboard["panels"] if "promise" in p["title"].lower()]
    queries = dashboard_queries({"panels": panels})
    assert len(panels) == 3 and len(queries) == 7  # moves by reason beside their p50, p90
    for expr in queries:
        assert prometheus.query(substitute_grafana_variables(expr, "30s")), expr


def test_promtool_finds_nothing_to_say_of_the_exposition(
    server: RunningServer, promise_load: dict[str, float],
) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "Debian's prometheus package ships promtool beside prometheus"
    assert server.metrics_port
    text = scrape_text(server.metrics_port)
    assert "hpcdispatch_promise_moved_later_seconds_bucket" in text
    checked = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                             text=True, timeout=60)
    assert checked.returncode == 0 and not (checked.stdout + checked.stderr).strip(), (
        checked.stdout + checked.stderr)
