"""The example plugin package end to end (issue #35, docs/plugins.md): installed into a temporary
target, replayed by name with `hpcdispatch simulate`, served by `hpcdispatch serve` and called
over gRPC by name; and broken plugins served: each reported by name (answer, log, metrics) and
answered by the fallback, the server serving on."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from hpcdispatch.client import DispatcherClient
from hpcdispatch.decision_check import check_decision
from hpcdispatch.proto_convert import decision_from_pb, snapshot_from_pb
from hpcdispatch.server.domain.profiles import DEFAULT_PROFILE
from hpcdispatch.sim_adapter.outputs import JOB_COLUMNS, REPORTED_START_COLUMNS
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.observability import free_port, scrape_text, small_request, value
from tests.plugin_packages import (
    BROKEN_DISPATCHERS,
    BROKEN_PREDICTORS,
    EXAMPLE,
    PROCESS_ENDING,
    ROOT,
    install_example,
    write_broken_plugins,
)
from tests.processes import start_serve, stop_process
from tests.repo.test_repo_docs import Block, fenced_blocks

PAGE = "docs/plugins.md"

pytestmark = pytest.mark.slow
# For a server whose hanging plugin still runs when it is stopped: it waits the grace period
# for it (then names it and exits 1, tests/server/rpc/test_shutdown.py), not the default 30 s.
SHORT_GRACE = "grace_seconds: 2\n"


def _env(site: Path) -> dict[str, str]:
    """This environment with `site` (and the checkout, for `benchmarks`) on the path."""
    paths = [str(site), str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


@pytest.fixture(scope="module")
def example_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_example(tmp_path_factory.mktemp("example-plugin"))


class Served:
    """An `hpcdispatch serve` process, its port and its log lines (read as they come)."""

    def __init__(self, config: Path, env: dict[str, str]) -> None:
        self.env = env  # the plugins' site on its PYTHONPATH
        self.proc, self.port, self.lines = start_serve(config, env=env)
        self.target = f"127.0.0.1:{self.port}"
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def logged(self) -> list[dict[str, object]]:
        return [json.loads(line) for line in list(self.lines) if line.startswith("{")]

    def stop(self) -> None:
        stop_process(self.proc, 60)
        self._reader.join(60)


@pytest.fixture
def served_example(example_site: Path, tmp_path: Path) -> Iterator[Served]:
    config = tmp_path / "server.yaml"
    config.write_text("default_dispatcher: sjf-backfill\ndefault_predictor: user-longest\n"
                      "workers: 3\n")
    served = Served(config, _env(example_site))
    yield served
    served.stop()


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _page_block(marker_start: str, language: str, containing: str = "") -> Block:
    """The block of docs/plugins.md after a marker line starting `marker_start`."""
    found = [b for b in fenced_blocks(PAGE) if b.marker.startswith(marker_start)
             and b.language == language and containing in b.text]
    assert len(found) == 1, (marker_start, containing)
    return found[0]


def test_the_page_shows_the_example_package_as_it_is() -> None:
    shown = {b.marker.removeprefix("<!-- file: ").removesuffix(" -->"): b.text
             for b in fenced_blocks(PAGE) if b.marker.startswith("<!-- file: ")}
    package = EXAMPLE.relative_to(ROOT)
    assert set(shown) == {f"{package}/pyproject.toml",
                          f"{package}/src/sjf_backfill_plugin/dispatcher.py",
                          f"{package}/src/sjf_backfill_plugin/predictor.py"}
    for path, text in shown.items():
        assert (ROOT / path).read_text(encoding="utf-8") == text, path


def test_the_pages_replay_runs_the_plugin_as_the_built_in_it_reproduces(
    example_site: Path, tmp_path: Path,
) -> None:
    """The page's one command replays `sjf-backfill` against EASY and the CP default; the
    plugin, written against the public interface, starts every job of the bundled slice where
    and when the built-in `easy-sjbf` does, under the plugin's predictor."""
    command = _page_block("<!-- not run in tests: needs the plugin", "bash", "simulate").text
    assert command.startswith(".venv/bin/hpcdispatch simulate ")
    words = [sys.executable, "-m", "hpcdispatch", *command.split()[1:], "--no-progress"]
    done = subprocess.run(words, env=_env(example_site), cwd=tmp_path, capture_output=True,
                          text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-4000:]
    rows = {line.split()[0] for line in done.stdout.splitlines() if "-user-longest" in line}
    assert rows == {"sjf-backfill-user-longest", "easy-sjbf-user-longest",
                    "easy-user-longest", f"pcp20(default)-{DEFAULT_PROFILE}-user-longest"}
    out = tmp_path / "runs" / "plugin"
    plugin, built_in = out / "01-sjf-backfill", out / "02-easy-sjbf"
    # Where and when each job started: every column but the starts the dispatcher reported
    # while jobs waited (the plugin reports none; easy-sjbf its head's promise).
    started = [c for c in JOB_COLUMNS if c not in REPORTED_START_COLUMNS]
    assert [[r[c] for c in started] for r in _rows(plugin / "jobs.csv")] == [
        [r[c] for c in started] for r in _rows(built_in / "jobs.csv")]
    decisions = _rows(plugin / "decisions.csv")
    assert decisions and {(d["dispatcher"], d["predictor"], d["fallback_reason"])
                          for d in decisions} == {("sjf-backfill", "user-longest", "")}


def test_the_example_is_served_and_called_by_name(served_example: Served) -> None:
    with DispatcherClient(served_example.target, timeout=120) as client:
        described = client.describe()
        assert "sjf-backfill" in described.dispatcher_names
        assert "user-longest" in described.predictor_names
        assert (described.default_dispatcher, described.default_dispatcher_name) == (
            pb.DISPATCHER_UNSPECIFIED, "sjf-backfill")
        assert not described.unavailable
        request = small_request(queued=40)
        request.dispatcher_name, request.predictor_name = "sjf-backfill", "user-longest"
        for answer in (client.dispatch(request),
                       client.session().decide(request), client.dispatch(small_request())):
            report = answer.report
            assert (report.dispatcher_name, report.predictor_name, report.fallback_reason) == (
                "sjf-backfill", "user-longest", "")
            assert report.dispatcher == pb.DISPATCHER_UNSPECIFIED and answer.starts
            snapshot = snapshot_from_pb(request)
            assert check_decision(snapshot, decision_from_pb(answer)) == []
        request.dispatcher = pb.DISPATCHER_EASY  # and the name says sjf-backfill
        with pytest.raises(grpc.RpcError) as refused:
            client.dispatch(request)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "dispatcher_name" in str(refused.value.details())
    client_code = _page_block("<!-- client:", "python").text
    done = subprocess.run([sys.executable, "-c", client_code, served_example.target],
                          env=served_example.env, cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    offered, answer = done.stdout.splitlines()
    assert offered == "sjf-backfill offered: True"
    assert answer.startswith("sjf-backfill user-longest ") and answer.endswith("none")
    done = subprocess.run(
        [sys.executable, "-m", "hpcdispatch", "dispatch", "--target", served_example.target,
         "--dispatcher", "sjf-backfill", "--output", os.devnull],
        env=served_example.env, cwd=ROOT,
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stderr.startswith("sjf-backfill: ")


def test_broken_plugins_are_reported_by_name_and_the_server_serves_on(tmp_path: Path) -> None:
    site = write_broken_plugins(tmp_path / "site")
    metrics_port = free_port()
    config = tmp_path / "server.yaml"
    # Decisions without a caller's deadline get 2 s: the hanging plugin's is cut there, and
    # the test waits for answers, not for time.
    config.write_text(f"default_dispatcher: easy\nmetrics_port: {metrics_port}\n"
                      f"max_decision_seconds: 2\nworkers: 3\n{SHORT_GRACE}")
    served = Served(config, _env(site))
    try:
        with DispatcherClient(served.target, timeout=300) as client:
            described = client.describe()
            assert {(u.group, u.name) for u in described.unavailable} == {
                ("dispatcher", "missing-module"), ("dispatcher", "not-a-dispatcher"),
                ("predictor", "predictor-missing")}
            assert "raises" in described.dispatcher_names
            assert "missing-module" not in described.dispatcher_names
            for name in BROKEN_DISPATCHERS:
                request = small_request()
                request.dispatcher_name = name
                answer = client.dispatch(request)
                assert answer.report.status == pb.SOLVE_STATUS_FALLBACK, name
                assert f"({name})" in answer.report.fallback_reason, name
                assert answer.report.dispatcher_name == name
                assert check_decision(snapshot_from_pb(request), decision_from_pb(answer)) == []
            for name in BROKEN_PREDICTORS:
                request = small_request()
                request.predictor_name = name
                answer = client.dispatch(request)
                assert not answer.report.fallback_reason and answer.starts, name
                assert answer.report.predictor_name == name
                assert {s.job_id: s.expected_duration for s in answer.starts} == {
                    q.id: q.requested_time for q in request.queued_jobs
                    if q.id in {s.job_id for s in answer.starts}}
            text = scrape_text(metrics_port)
            assert client.dispatch(small_request()).starts  # EASY, as before
        with grpc.insecure_channel(served.target) as channel:
            health = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=60)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        served.stop()
    fallbacks = "hpcdispatch_fallback_decisions_total"
    for name, reason in BROKEN_DISPATCHERS.items():
        assert value(text, fallbacks, dispatcher=name, reason=reason) == 1, name
    for name, reason in BROKEN_PREDICTORS.items():
        assert value(text, "hpcdispatch_predictor_failures_total", predictor=name,
                     reason=reason) >= 1, name
    loaded = "hpcdispatch_plugin_loaded"
    assert value(text, loaded, group="dispatcher", plugin="missing-module") == 0
    assert value(text, loaded, group="dispatcher", plugin="raises") == 1
    assert value(text, loaded, group="predictor", plugin="predictor-missing") == 0
    failed = {(line.get("event"), line.get("dispatcher")) for line in served.logged()}
    for name in BROKEN_DISPATCHERS:
        expected = ("dispatcher could not be loaded" if BROKEN_DISPATCHERS[name] == "load_failed"
                    else "decision failed the independent check"
                    if BROKEN_DISPATCHERS[name] == "check_failed" else "dispatcher failed")
        assert (expected, name) in failed, name


def _dispatch_retrying(client: DispatcherClient, request: pb.DispatchRequest
                       ) -> pb.DispatchResponse:
    """The answer to `request`, asked again (a tenth of a second apart) while the server says
    RESOURCE_EXHAUSTED (every decision thread busy), for 120 s at most."""
    give_up = time.monotonic() + 120
    while True:
        try:
            return client.dispatch(request)
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED or time.monotonic() > give_up:
                raise
            time.sleep(0.1)


@pytest.mark.timeout(600)
def test_a_hanging_plugin_predictor_leaves_the_decision_threads_to_the_others(
    tmp_path: Path,
) -> None:
    """Issue #43: two decisions asking for a predictor that never answers took both decision
    threads for good, and even a plain EASY Dispatch was refused. Now each waits a share of its
    deadline at most (the requested times answer), and the EASY decisions beside them are
    answered."""
    site = write_broken_plugins(tmp_path / "site")
    metrics_port = free_port()
    config = tmp_path / "server.yaml"
    config.write_text(f"default_dispatcher: easy\nmetrics_port: {metrics_port}\n"
                      f"max_decision_seconds: 4\nworkers: 3\n{SHORT_GRACE}")  # two decision threads
    served = Served(config, _env(site))
    try:
        with DispatcherClient(served.target, timeout=300) as client:
            hanging = small_request()
            hanging.predictor_name = "predictor-hangs"
            answers: list[pb.DispatchResponse] = []
            # An EASY call may hold a slot when a hanging one arrives: both kinds retry.
            callers = [threading.Thread(
                target=lambda: answers.append(_dispatch_retrying(client, hanging)))
                for _ in range(2)]
            for caller in callers:
                caller.start()
            easy = [_dispatch_retrying(client, small_request(seed=seed)) for seed in range(5)]
            for caller in callers:
                caller.join(300)
            text = scrape_text(metrics_port)
        with grpc.insecure_channel(served.target) as channel:
            health = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=60)
    finally:
        served.stop()
    assert all(answer.starts and not answer.report.fallback_reason for answer in easy)
    assert len(answers) == 2
    requested = {q.id: q.requested_time for q in hanging.queued_jobs}
    for answer in answers:  # the plugin's batch answered with the requested times
        assert answer.starts and answer.report.predictor_name == "predictor-hangs"
        assert all(s.expected_duration == requested[s.job_id] for s in answer.starts)
    assert value(text, "hpcdispatch_predictor_failures_total", predictor="predictor-hangs",
                 reason="deadline_passed") >= 2
    assert health.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize("name", sorted(PROCESS_ENDING))
def test_a_plugin_that_ends_the_process_is_named_in_the_log_first(
    tmp_path: Path, name: str,
) -> None:
    """A plugin calling os._exit ends the server (nothing in a process can stop that), but the
    log's last line names it (issue #43: it ended without a line naming it)."""
    site = write_broken_plugins(tmp_path / "site")
    config = tmp_path / "server.yaml"
    config.write_text("default_dispatcher: easy\n")
    served = Served(config, _env(site))
    group, call = PROCESS_ENDING[name]
    try:
        request = small_request()
        setattr(request, f"{group}_name", name)
        with DispatcherClient(served.target, timeout=120) as client, \
                pytest.raises(grpc.RpcError):
            client.dispatch(request)
        assert served.proc.wait(120) == 7
        served._reader.join(60)
    finally:
        served.stop()
    ended = [line for line in served.logged() if line.get("event") == "plugin ended the process"]
    assert len(ended) == 1, served.lines[-5:]
    assert {k: ended[0].get(k) for k in ("plugin", "group", "call", "how", "level")} == {
        "plugin": name, "group": group, "call": call, "how": "os._exit(7)",
        "level": "critical"}


def test_a_replay_of_a_raising_plugin_logs_its_first_failure_and_fails_loudly(
    tmp_path: Path,
) -> None:
    """Issue #43: a plugin raising at each of a 300-job replay's 506 decisions wrote 506 JSON
    tracebacks (520 KB), and the replay, which measured the fallback only, exited 0. Now the
    first failure is logged with its traceback, then the 10th and 100th with the count, and
    the replay says that its decisions were all the fallback's, exit 1."""
    site = write_broken_plugins(tmp_path / "site")
    done = subprocess.run(
        [sys.executable, "-m", "hpcdispatch", "simulate", "--records", "0:300", "--dispatcher",
         "raises", "--no-progress", "--out", str(tmp_path / "runs")],
        env=_env(site), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stderr[-2000:]
    logged = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    failed = [line for line in logged if line.get("event") == "dispatcher failed"]
    assert [line.get("failures_so_far") for line in failed] == [None, 10, 100]
    assert "Traceback" in str(failed[0]["trace"])
    assert not any("trace" in line for line in failed[1:])
    assert len(done.stderr) < 20_000
    lines = done.stderr.strip().splitlines()
    assert "raises-data-driven: 506 of 506 decisions were answered by the fallback (EASY); " \
        "the first because: dispatcher error (raises): RuntimeError('boom from a plugin')" \
        in done.stderr
    assert lines[-1] == ("hpcdispatch simulate: every decision of raises-data-driven was the "
                         "fallback's (EASY): those rows measure EASY, not the dispatcher asked "
                         "for")


def test_campaigns_and_qos_targets_run_every_registered_dispatcher(
    example_site: Path, tmp_path: Path,
) -> None:
    """`--dispatchers all` and `--baselines all` include the installed plugin's dispatcher."""
    script = ("from benchmarks.matrix.campaign import matrix, parse_args\n"
              "print([c['dispatcher'] for c in matrix(parse_args(['--dispatchers', 'all']))])")
    done = subprocess.run([sys.executable, "-c", script], env=_env(example_site), cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "'sjf-backfill'" in done.stdout and "'pcp20'" in done.stdout
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.qos.targets", "--cases", "kth", "--predictors",
         "walltime", "--baselines", "all", "--dry-run"],
        env=_env(example_site), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "kth__" in done.stdout and "sjf-backfill" in done.stdout
