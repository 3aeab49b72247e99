"""`hpcdispatch serve` and `hpcdispatch dispatch` as processes, as an operator runs them."""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from hpcdispatch.client import DispatcherClient
from hpcdispatch.proto_convert import snapshot_to_pb
from hpcdispatch.server.config import load_config
from hpcdispatch.server.rpc.app import start_server
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import PRESETS
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc
from tests.observability import free_port, scrape_text, value
from tests.processes import start_serve

CLI = [sys.executable, "-m", "hpcdispatch"]


def test_sigterm_finishes_the_decision_in_flight_after_health_goes_not_serving(
    tmp_path: Path,
) -> None:
    config = tmp_path / "server.yaml"
    metrics_port = free_port()
    config.write_text("default_dispatcher: pcp20\nworkers: 2\ngrace_seconds: 20\n"
                      f"metrics_port: {metrics_port}\n")
    # Port 0: the server picks a free port and logs it ("serving", port=N).
    proc, port, lines = start_serve(config)
    assert proc.stdout is not None
    target = f"127.0.0.1:{port}"
    try:
        client = DispatcherClient(target, timeout=30)
        client.wait_ready(timeout=30)
        request = snapshot_to_pb(synthetic_snapshot(PRESETS["eurora"], 80, 0.7, seed=4))
        request.dispatcher = pb.DISPATCHER_PCP20
        request.search.profile = "papers"
        request.search.delta_ms = 1500  # long enough to be in flight when SIGTERM arrives
        request.search.delta_max_ms = 1500  # one attempt, however loaded the machine is
        request.search.k = 1
        result: dict[str, object] = {}

        def call() -> None:
            try:
                result["response"] = client.dispatch(request, timeout=30)
            except grpc.RpcError as exc:  # pragma: no cover - reported below
                result["error"] = exc

        worker = threading.Thread(target=call)
        worker.start()
        # SIGTERM once the server counts the decision as in progress (however loaded the
        # machine, a fixed sleep could signal before the request arrived or after it ended).
        deadline = time.monotonic() + 20
        while value(scrape_text(metrics_port), "hpcdispatch_decisions_in_progress") < 1:
            assert time.monotonic() < deadline and worker.is_alive(), "decision never in flight"
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        with grpc.insecure_channel(target) as channel:
            statuses = set()
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                try:
                    reply = health_pb2_grpc.HealthStub(channel).Check(
                        health_pb2.HealthCheckRequest(service=""), timeout=1
                    )
                    statuses.add(reply.status)
                    if reply.status == health_pb2.HealthCheckResponse.NOT_SERVING:
                        break
                except grpc.RpcError as exc:
                    raise AssertionError(f"health refused during the grace period: {exc}"
                                         ) from exc
                time.sleep(0.05)
        worker.join(timeout=30)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise AssertionError("server did not exit:\n" + "".join(lines)
                                 + proc.communicate()[0]) from None
        assert "error" not in result, result
        response = result["response"]
        assert isinstance(response, pb.DispatchResponse) and response.starts
        assert code == 0
        # While the decision is in flight the server still answers: health says NOT_SERVING.
        assert health_pb2.HealthCheckResponse.NOT_SERVING in statuses, statuses
        client.close()
    finally:
        if proc.poll() is None:
            proc.kill()
        # (communicate() has already read the output when the server did not exit)
        rest = proc.communicate()[0] if proc.stdout and not proc.stdout.closed else ""
        output = "".join(lines) + rest
    assert "stopping" in output and "SIGTERM" in output


def test_dispatch_command_on_the_embedded_default(tmp_path: Path) -> None:
    out = tmp_path / "decision.json"
    done = subprocess.run([*CLI, "dispatch", "--output", str(out)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    decision = json.loads(out.read_text())
    assert decision["starts"] and decision["report"]["dispatcher"] == "DISPATCHER_PCP20"
    assert "queued jobs start now" in done.stderr


def test_dispatch_command_reports_a_bad_snapshot(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"time": "10", "nodes": [{"id": "a", "state": "NODE_STATE_UP",
                                                         "capacity": {"core": "0"}}]}))
    done = subprocess.run([*CLI, "dispatch", str(bad)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1
    assert 'INVALID_ARGUMENT' in done.stderr
    assert '  nodes[0].capacity["core"]: must be > 0 and <= 2^40, got 0' in done.stderr.splitlines()
    assert "Traceback" not in done.stderr


def long_decision_request() -> pb.DispatchRequest:
    """A decision that takes about 1.5 s: one 1.5 s CP-SAT attempt."""
    request = snapshot_to_pb(synthetic_snapshot(PRESETS["eurora"], 80, 0.7, seed=4))
    request.dispatcher = pb.DISPATCHER_PCP20
    request.search.profile = "papers"
    request.search.delta_ms = 1500
    request.search.delta_max_ms = 1500
    request.search.k = 1
    return request


def test_during_the_grace_period_health_is_not_serving_and_new_decisions_go_elsewhere() -> None:
    """stop(): health answers NOT_SERVING (not UNAVAILABLE), a new Dispatch is UNAVAILABLE,
    other calls are served, and the decision in flight finishes before the server stops."""
    config = dataclasses.replace(load_config(env={}), listen="127.0.0.1:0", workers=4)
    running = start_server(config)
    result: dict[str, object] = {}
    with grpc.insecure_channel(running.target) as channel:
        stub = pb_grpc.DispatcherServiceStub(channel)

        def call() -> None:
            try:
                result["response"] = stub.Dispatch(long_decision_request(), timeout=30)
            except grpc.RpcError as exc:  # pragma: no cover - reported below
                result["error"] = exc

        worker = threading.Thread(target=call)
        worker.start()
        deadline = time.monotonic() + 20
        while running.drain.in_flight < 1:
            assert time.monotonic() < deadline and worker.is_alive(), "decision never in flight"
            time.sleep(0.01)
        stopper = threading.Thread(target=running.stop, kwargs={"grace": 20.0})
        stopper.start()
        time.sleep(0.2)  # stop() has begun (it turns health NOT_SERVING first)
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "hpcdispatch.v1.DispatcherService"):
            reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING
        with pytest.raises(grpc.RpcError) as refused:
            stub.Dispatch(long_decision_request(), timeout=5)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
        assert "shutting down" in refused.value.details()  # type: ignore[attr-defined]
        assert stub.DescribeService(pb.DescribeServiceRequest(), timeout=5).version
        assert worker.is_alive(), "the first decision should still be in flight"
        worker.join(timeout=30)
        stopper.join(timeout=30)
    assert not stopper.is_alive()
    assert "error" not in result, result
    response = result["response"]
    assert isinstance(response, pb.DispatchResponse) and response.starts


@pytest.mark.parametrize(
    ("config_text", "expected"),
    [
        ("decision_concurrency: -3\n",
         "configuration key 'decision_concurrency': must be >= 0"),
        ("no_such_key: 1\n", "unknown configuration key 'no_such_key'"),
        ("workers: [\n", "hpcdispatch serve: "),
        (None, "cannot read --config"),
    ],
)
def test_serve_with_an_invalid_configuration_exits_2_with_one_message(
    tmp_path: Path, config_text: str | None, expected: str
) -> None:
    file = tmp_path / "server.yaml"
    if config_text is not None:
        file.write_text(config_text)
    done = subprocess.run([*CLI, "serve", "--config", str(file)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr
    assert "Traceback" not in done.stderr
