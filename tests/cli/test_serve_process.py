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
from hpcdispatch.server.dispatchers import DISPATCHERS
from hpcdispatch.server.rpc.app import start_server
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import PRESETS
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc
from tests.instances import Held
from tests.observability import free_port, scrape_text, value
from tests.processes import start_serve

CLI = [sys.executable, "-m", "hpcdispatch"]


def test_sigterm_finishes_the_decision_in_flight_after_health_goes_not_serving(
    tmp_path: Path,
) -> None:
    config = tmp_path / "server.yaml"
    metrics_port = free_port()
    config.write_text("default_dispatcher: pcp20\nworkers: 2\ngrace_seconds: 300\n"
                      f"metrics_port: {metrics_port}\n")
    # The decision is held in the server until the test has seen health go NOT_SERVING, so
    # it is in flight however loaded the machine (a long search could end too soon or late).
    release = tmp_path / "release"
    proc, port, lines = start_serve(config, held_until=release)
    assert proc.stdout is not None
    target = f"127.0.0.1:{port}"
    try:
        client = DispatcherClient(target, timeout=300)
        client.wait_ready(timeout=120)
        request = snapshot_to_pb(synthetic_snapshot(PRESETS["eurora"], 80, 0.7, seed=4))
        request.dispatcher = pb.DISPATCHER_PCP20
        result: dict[str, object] = {}

        def call() -> None:
            try:
                result["response"] = client.dispatch(request, timeout=300)
            except grpc.RpcError as exc:  # pragma: no cover - reported below
                result["error"] = exc

        worker = threading.Thread(target=call)
        worker.start()
        # SIGTERM once the server counts the decision as in progress.
        give_up = time.monotonic() + 120
        while value(scrape_text(metrics_port), "hpcdispatch_decisions_in_progress") < 1:
            assert time.monotonic() < give_up and worker.is_alive(), "decision never in flight"
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        with grpc.insecure_channel(target) as channel:
            statuses = set()
            give_up = time.monotonic() + 120
            while time.monotonic() < give_up:
                try:
                    reply = health_pb2_grpc.HealthStub(channel).Check(
                        health_pb2.HealthCheckRequest(service=""), timeout=30
                    )
                    statuses.add(reply.status)
                    if reply.status == health_pb2.HealthCheckResponse.NOT_SERVING:
                        break
                except grpc.RpcError as exc:
                    raise AssertionError(f"health refused during the grace period: {exc}"
                                         ) from exc
                time.sleep(0.05)
        assert worker.is_alive(), "the decision should be held in flight"
        release.touch()
        worker.join(timeout=300)
        try:
            code = proc.wait(timeout=120)
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


def test_during_the_grace_period_health_is_not_serving_and_new_decisions_go_elsewhere(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """stop(): health answers NOT_SERVING (not UNAVAILABLE), a new Dispatch is UNAVAILABLE,
    other calls are served, and the decision in flight (held until the test has seen all
    that) finishes before the server stops."""
    held = Held(pb.DISPATCHER_PCP20, pb.DISPATCHER_EASY)
    monkeypatch.setitem(DISPATCHERS, pb.DISPATCHER_PCP20, held)
    config = dataclasses.replace(load_config(env={}), listen="127.0.0.1:0", workers=4)
    running = start_server(config)
    result: dict[str, object] = {}
    request = snapshot_to_pb(synthetic_snapshot(PRESETS["eurora"], 80, 0.7, seed=4))
    request.dispatcher = pb.DISPATCHER_PCP20
    with grpc.insecure_channel(running.target) as channel:
        stub = pb_grpc.DispatcherServiceStub(channel)

        def call() -> None:
            try:
                result["response"] = stub.Dispatch(request, timeout=300)
            except grpc.RpcError as exc:  # pragma: no cover - reported below
                result["error"] = exc

        worker = threading.Thread(target=call)
        worker.start()
        assert held.entered.wait(120), "decision never in flight"
        stopper = threading.Thread(target=running.stop, kwargs={"grace": 300.0})
        stopper.start()
        health = health_pb2_grpc.HealthStub(channel)
        give_up = time.monotonic() + 120
        while health.Check(health_pb2.HealthCheckRequest(service=""), timeout=30).status != \
                health_pb2.HealthCheckResponse.NOT_SERVING:  # stop() has begun
            assert time.monotonic() < give_up, "health never went NOT_SERVING"
            time.sleep(0.01)
        for service in ("", "hpcdispatch.v1.DispatcherService"):
            reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=30)
            assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING
        with pytest.raises(grpc.RpcError) as refused:
            stub.Dispatch(request, timeout=30)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
        assert "shutting down" in refused.value.details()  # type: ignore[attr-defined]
        assert stub.DescribeService(pb.DescribeServiceRequest(), timeout=30).version
        assert worker.is_alive(), "the first decision should still be in flight"
        held.release.set()
        worker.join(timeout=300)
        stopper.join(timeout=300)
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
