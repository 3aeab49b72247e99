"""After SIGTERM, `hpcdispatch serve` exits within its grace period whatever a plugin does
(issue #43, item 3; issue #51, item 4): a call stuck in a plugin's code, a plugin's decision or
prediction still running after its caller got the fallback, or a thread a plugin left behind, is
named in one log line and the process exits (status 1, docs/deployment.md); a clean stop exits 0.

Real `hpcdispatch serve` processes with a plugin package on their PYTHONPATH (an installed
distribution: a module and its dist-info). Every verdict is an event (a file the plugin
writes, the process's exit, its log lines); WAIT only bounds the waiting for a process that
would otherwise never exit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import grpc
import pytest

from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc
from tests.processes import ROOT, start_serve, stop_process
from tests.server.sessions.test_session_calls import WAIT, snapshot, wait_for

MODULE = "stuck_hpcdispatch_plugins"
GRACE_SECONDS = 2.0

_SOURCE = '''"""A dispatcher and predictors that would keep a server from stopping."""

import os
import threading
from pathlib import Path


class NeverDecides:
    """Never answers: once asked, it says so in the file $STUCK_MARKER and waits for good."""

    def decide(self, problem, control):
        Path(os.environ["STUCK_MARKER"]).touch()
        threading.Event().wait()


class Stuck:
    """Never answers: once asked, it says so in the file $STUCK_MARKER and waits for good."""

    def __init__(self, history):
        pass

    def predict_many(self, jobs):
        Path(os.environ["STUCK_MARKER"]).touch()
        threading.Event().wait()


class LeavesThread:
    """Predicts the requested times, and leaves behind a thread (not a daemon) that never ends."""

    def __init__(self, history):
        pass

    def predict_many(self, jobs):
        threading.Thread(target=threading.Event().wait, name="plugin-flusher",
                         daemon=False).start()
        return [job.requested_time for job in jobs]
'''

_ENTRY_POINTS = f"""[hpcdispatch.dispatchers]
never-decides = {MODULE}:NeverDecides

[hpcdispatch.predictors]
stuck = {MODULE}:Stuck
leaves-thread = {MODULE}:LeavesThread
"""
# Decisions without a caller's deadline get this long: a plugin that never decides is answered
# by the fallback then, and still runs.
DECISION_SECONDS = 2


@pytest.fixture
def plugins(tmp_path: Path) -> Path:
    """The plugin package as an installed distribution under a folder for PYTHONPATH."""
    root = tmp_path / "site"
    info = root / f"{MODULE}-0.1.dist-info"
    info.mkdir(parents=True)
    (root / f"{MODULE}.py").write_text(_SOURCE, encoding="utf-8")
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {MODULE}\nVersion: 0.1\n",
                                   encoding="utf-8")
    (info / "entry_points.txt").write_text(_ENTRY_POINTS, encoding="utf-8")
    return root


def serve_with(plugins: Path, tmp_path: Path) -> tuple[subprocess.Popen[str], str, Path]:
    config = tmp_path / "server.yaml"
    config.write_text(f"workers: 2\ngrace_seconds: {GRACE_SECONDS}\n"
                      f"max_decision_seconds: {DECISION_SECONDS}\n", encoding="utf-8")
    marker = tmp_path / "asked"
    path = os.pathsep.join([str(plugins), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    proc, port, _ = start_serve(config, env={"PYTHONPATH": path, "STUCK_MARKER": str(marker)})
    return proc, f"127.0.0.1:{port}", marker


def exit_after_sigterm(proc: subprocess.Popen[str]) -> list[dict[str, Any]]:
    """SIGTERM; the JSON log lines once the process has exited (WAIT: a hang guard)."""
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=WAIT)
    except subprocess.TimeoutExpired:
        stop_process(proc, 5)  # SIGKILL: it would have lived on
        raise AssertionError("the server did not exit after SIGTERM") from None
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def dispatch_asking(target: str, predictor: str = "", dispatcher: str = "",
                    ) -> tuple[grpc.Channel, grpc.Future]:
    """A Dispatch naming the plugin `predictor` or `dispatcher`, in flight."""
    request = snapshot()
    if predictor:
        request.ClearField("predictor")
        request.predictor_name = predictor
    if dispatcher:
        request.ClearField("dispatcher")
        request.dispatcher_name = dispatcher
    channel = grpc.insecure_channel(target)
    return channel, pb_grpc.DispatcherServiceStub(channel).Dispatch.future(request, timeout=300)


def plugins_left(lines: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The plugin calls the line "work still running ..." names."""
    left = next(line for line in lines if line["event"].startswith("work still running"))
    assert left["level"] == "error"
    plugins: list[dict[str, str]] = left["plugins"]
    return plugins


def test_sigterm_with_a_plugin_stuck_in_a_decision_exits_within_the_grace_period(
    plugins: Path, tmp_path: Path,
) -> None:
    proc, target, marker = serve_with(plugins, tmp_path)
    channel, call = dispatch_asking(target, "stuck")
    try:
        wait_for(marker.exists, "the plugin was asked for a prediction")
        lines = exit_after_sigterm(proc)
        call.exception(timeout=WAIT)  # answered or ended: not left waiting
    finally:
        channel.close()
    events = [line["event"] for line in lines]
    assert "stopped" in events
    # The decision went on without the plugin when its caller was cancelled; the plugin's
    # prediction still runs in its own thread: named, and left (exit status 1).
    assert proc.returncode == 1, proc.returncode
    [left] = plugins_left(lines)
    assert (left["plugin"], left["group"], left["call"]) == ("stuck", "predictor",
                                                             "predict_many")
    assert f"{MODULE}.py" in left["at"] and "predict_many" in left["at"]


@pytest.mark.parametrize("answered", [False, True], ids=["in-flight", "answered"])
def test_sigterm_with_a_plugin_decision_that_never_returns_exits_1_naming_it(
    plugins: Path, tmp_path: Path, answered: bool,
) -> None:
    """Issue #51: the plugin's decision never returns. In flight at SIGTERM, or answered by
    the fallback at its deadline before it: either way the plugin still runs at the end of
    the grace period, and the process names it and exits 1 (docs/deployment.md)."""
    proc, target, marker = serve_with(plugins, tmp_path)
    channel, call = dispatch_asking(target, dispatcher="never-decides")
    try:
        wait_for(marker.exists, "the plugin was asked for a decision")
        if answered:
            answer = call.result(timeout=WAIT)
            assert answer.report.status == pb.SOLVE_STATUS_FALLBACK
            assert "(never-decides)" in answer.report.fallback_reason
        lines = exit_after_sigterm(proc)
        if not answered:
            call.exception(timeout=WAIT)  # answered or ended: not left waiting
    finally:
        channel.close()
    assert proc.returncode == 1, proc.returncode
    [left] = plugins_left(lines)
    assert (left["plugin"], left["group"], left["call"]) == ("never-decides", "dispatcher",
                                                             "decide")
    assert f"{MODULE}.py" in left["at"] and "decide" in left["at"]
    assert "stopped" in [line["event"] for line in lines]


def test_sigterm_with_a_thread_a_plugin_left_names_it_and_exits(
    plugins: Path, tmp_path: Path,
) -> None:
    proc, target, _ = serve_with(plugins, tmp_path)
    channel, call = dispatch_asking(target, "leaves-thread")
    try:
        assert call.result(timeout=WAIT).time == snapshot().time
        lines = exit_after_sigterm(proc)
    finally:
        channel.close()
    assert proc.returncode == 1
    left = next(line for line in lines if line["event"].startswith("work still running"))
    assert left.get("calls") is None  # every call ended
    assert {t["thread"] for t in left["threads"]} == {"plugin-flusher"}
    assert "stopped" in [line["event"] for line in lines]


def test_a_clean_stop_exits_zero_without_naming_anything(plugins: Path, tmp_path: Path) -> None:
    proc, target, _ = serve_with(plugins, tmp_path)
    with grpc.insecure_channel(target) as channel:
        request = snapshot()
        assert pb_grpc.DispatcherServiceStub(channel).Dispatch(request, timeout=WAIT).time \
            == request.time
    lines = exit_after_sigterm(proc)
    assert proc.returncode == 0
    assert not [line for line in lines if line["event"].startswith("work still running")]
    assert [line["event"] for line in lines][-1] == "stopped"
