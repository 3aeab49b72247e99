"""Helpers of the observability tests: free ports, a small snapshot, a metrics server, scraping."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import socket
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from hpcdispatch.proto_convert import snapshot_to_pb
from hpcdispatch.server.config import load_config
from hpcdispatch.server.rpc.app import RunningServer, start_server
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import PRESETS
from hpcdispatch.v1 import dispatcher_pb2 as pb


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def small_request(queued: int = 30, seed: int = 1) -> pb.DispatchRequest:
    """An Eurora-size snapshot with a few queued jobs: decided in milliseconds."""
    return snapshot_to_pb(synthetic_snapshot(PRESETS["eurora"], queued, seed=seed))


@contextmanager
def metrics_server(**overrides: Any) -> Iterator[RunningServer]:
    """A server on loopback with /metrics on a free port."""
    for attempt in range(5):
        # Another process may take the port between free_port() and the bind: try another.
        settings: dict[str, Any] = {
            "listen": "127.0.0.1:0", "metrics_port": free_port(), "workers": 2, **overrides
        }
        config = dataclasses.replace(load_config(env={}), **settings)
        try:
            running = start_server(config)
            break
        except OSError:
            if attempt == 4:
                raise
    try:
        yield running
    finally:
        running.stop(grace=1.0)


def scrape_text(port: int, host: str = "127.0.0.1") -> str:
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=60) as reply:
        return str(reply.read().decode("utf-8"))


def scrape_settled(port: int, host: str = "127.0.0.1", within_s: float = 30.0) -> str:
    """A scrape taken once every started RPC is also counted as handled.

    An RPC that ends in an error status (abort) reaches its caller before the server's
    interceptor counts it handled, so a scrape right after the caller's error may miss it;
    wait for that event (bounded), then return the scrape.
    """
    deadline = time.monotonic() + within_s
    while True:
        text = scrape_text(port, host)
        if (value(text, "grpc_server_handled_total") >= value(text, "grpc_server_started_total")
                or time.monotonic() > deadline):
            return text
        time.sleep(0.01)


def samples(text: str) -> list[Sample]:
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def value(text: str, name: str, **labels: str) -> float:
    """Sum of the samples named `name` whose labels include `labels` (0 when none)."""
    return sum(
        s.value for s in samples(text)
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    )


def exported_names(text: str) -> set[str]:
    """Every series name the exposition can produce, whether or not it has samples yet."""
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "summary": ("_sum", "_count", "_created", ""),
        "gauge": ("",),
        "info": ("_info",),
    }
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.update(family.name + s for s in suffixes.get(family.type, ("",)))
        names.update(s.name for s in family.samples)
    return names


# -- PromQL --------------------------------------------------------------------------------------

_PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
    "offset", "inf", "nan",
}


def promql_metric_names(expr: str) -> set[str]:
    """Metric names an expression selects: identifiers that are neither functions, keywords,
    label names (inside {...} or by/without/on/ignoring (...)) nor durations."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # range selectors, subqueries
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        word = match.group()
        rest = text[match.end():].lstrip()
        if word.lower() in _PROMQL_WORDS or rest.startswith("("):
            continue
        before = text[: match.start()]
        if before and (before[-1].isdigit() or before[-1] == "."):
            continue  # 1e3, 0.5
        names.add(word)
    return names


def substitute_grafana_variables(expr: str, rate_interval: str = "1m") -> str:
    return (expr.replace("$__rate_interval", rate_interval).replace("$__interval", rate_interval)
            .replace('"$dispatcher"', '".*"'))


def dashboard_queries(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL expression of a Grafana dashboard: panel targets and template queries."""
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", []) if "expr" in t]
    for variable in dashboard.get("templating", {}).get("list", []):
        query = variable.get("query")
        text = query.get("query") if isinstance(query, dict) else query
        found = re.fullmatch(r"label_values\((.+),\s*\w+\)", str(text or ""))
        if found:
            queries.append(found.group(1))
    return queries


# -- Debian's prometheus -------------------------------------------------------------------------


def _unavailable(reason: str) -> NoReturn:
    """Skip with the reason; fail instead where CI requires the real Prometheus."""
    if os.environ.get("REQUIRE_PROMETHEUS_TESTS") == "1":
        pytest.fail(f"REQUIRE_PROMETHEUS_TESTS=1 but {reason}")
    pytest.skip(reason)


def ensure_prometheus() -> str:
    """Path of the prometheus binary; installs Debian's package if missing (saying so first),
    else skips; a quick run installs nothing (tests/system_packages.py)."""
    from tests.system_packages import apt_install, quick_run, quick_skip_reason

    if quick_run("prometheus"):
        _unavailable(quick_skip_reason("prometheus"))
    found = shutil.which("prometheus")
    if found:
        return found
    reason = apt_install("prometheus")
    if reason is not None:
        _unavailable(f"prometheus is {reason}" if reason.startswith("not installed")
                     else reason)
    found = shutil.which("prometheus")
    if not found:
        _unavailable("apt-get installed prometheus but no prometheus binary is on PATH")
    return found
