"""structlog output of a real server: JSON or console lines, request ids, one line per decision."""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
import structlog

from hpcdispatch.server.logging_config import configure_logging
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc
from tests.observability import metrics_server, small_request


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    yield stream
    structlog.reset_defaults()


def dispatch(
    target: str, request: pb.DispatchRequest, request_id: str | None = None
) -> tuple[pb.DispatchResponse, dict[str, str]]:
    """One call; returns the response and the server's initial metadata."""
    metadata = (("x-request-id", request_id),) if request_id else None
    with grpc.insecure_channel(target) as channel:
        response, call = pb_grpc.DispatcherServiceStub(channel).Dispatch.with_call(
            request, metadata=metadata, timeout=30
        )
        return response, {k: str(v) for k, v in call.initial_metadata()}


def json_lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def test_json_lines_carry_request_id_and_snapshot_time(log_stream: io.StringIO) -> None:
    configure_logging("json", "info", stream=log_stream)
    first, second = small_request(), small_request(seed=2)
    second.time = first.time + 600
    with metrics_server(metrics_port=None) as server:
        response, metadata = dispatch(server.target, first, request_id="req-42")
        _, metadata2 = dispatch(server.target, second)
    lines = json_lines(log_stream)
    decisions = [line for line in lines if line["event"] == "decision"]
    assert len(decisions) == 2
    one, two = decisions
    assert one["request_id"] == "req-42" == metadata["x-request-id"]
    assert one["snapshot_time"] == first.time
    assert one["rpc"] == "Dispatch" and one["level"] == "info" and one["timestamp"]
    report = response.report
    assert one["dispatcher"] == "pcp20"
    assert one["status"] == pb.SolveStatus.Name(report.status).removeprefix(
        "SOLVE_STATUS_").lower()
    assert one["started"] == len(response.starts)
    assert one["queued"] == len(first.queued_jobs)
    assert one["attempts"] == len(report.attempts)
    assert one["total_s"] == pytest.approx(report.total_seconds, abs=1e-4)
    assert {"build_s", "solve_s", "variables", "constraints"} <= one.keys()
    # Without a caller's id the server makes one, sends it back, and uses it in its lines.
    assert re.fullmatch(r"[0-9a-f]{32}", two["request_id"])
    assert two["request_id"] == metadata2["x-request-id"]
    assert two["snapshot_time"] == second.time
    # Lines outside a call (start, stop) carry no request context.
    serving = next(line for line in lines if line["event"] == "serving")
    assert "request_id" not in serving and "snapshot_time" not in serving


def test_console_lines_are_readable_not_json(log_stream: io.StringIO) -> None:
    configure_logging("console", "info", stream=log_stream)
    with metrics_server(metrics_port=None) as server:
        dispatch(server.target, small_request(), request_id="req-7")
    text = log_stream.getvalue()
    decision = next(line for line in text.splitlines() if "decision" in line)
    assert "request_id=req-7" in decision and "total_s=" in decision
    with pytest.raises(json.JSONDecodeError):
        json.loads(decision)


def test_the_level_filters_lines(log_stream: io.StringIO) -> None:
    configure_logging("json", "warning", stream=log_stream)
    bad = small_request()
    bad.queued_jobs[0].units = 0
    with metrics_server(metrics_port=None) as server:
        dispatch(server.target, small_request())
        with pytest.raises(grpc.RpcError):
            dispatch(server.target, bad, request_id="bad-1")
    lines = json_lines(log_stream)
    assert [line["event"] for line in lines] == ["invalid snapshot"]
    assert lines[0]["request_id"] == "bad-1" and lines[0]["level"] == "warning"


def test_auto_format_is_json_off_a_terminal(log_stream: io.StringIO) -> None:
    configure_logging("auto", "info", stream=log_stream)
    structlog.get_logger("t").info("hello", answer=42)
    assert json_lines(log_stream)[0]["answer"] == 42


@pytest.mark.parametrize(("fmt", "level", "key"), [
    ("xml", "info", "log_format"), ("json", "chatty", "log_level"),
])
def test_bad_settings_name_their_key(fmt: str, level: str, key: str) -> None:
    with pytest.raises(ValueError, match=key):
        configure_logging(fmt, level, stream=io.StringIO())
