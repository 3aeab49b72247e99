"""Held jobs' promised starts shown where Slurm's own commands show a job to its user: its
Comment (`squeue -o %k`), written by the bridge and cleared when the job is released to
start, the user's own comment kept. Against a real service (profile `book`: every held job
gets a promise) and the simulated Slurm of test_slurm_bridge_sessions; the real daemons are in
test_slurm_bridge_integration."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator

import pytest
from structlog.testing import capture_logs

from hpcdispatch.client import DispatcherClient
from hpcdispatch.server.rpc.app import RunningServer, ServerConfig, start_server
from hpcdispatch.slurm_bridge import cli as bridge_cli
from hpcdispatch.slurm_bridge.bridge import Bridge, BridgeConfig
from hpcdispatch.slurm_bridge.metrics import BridgeMetrics
from hpcdispatch.slurm_bridge.promise_comment import (
    MARKER,
    comment_updates,
    shows_promise,
    slurm_time,
    users_comment,
    with_promise,
)
from hpcdispatch.slurm_bridge.slurm_json import parse_jobs
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.slurm_bridge.test_slurm_bridge import FakeSlurm
from tests.slurm_bridge.test_slurm_bridge_sessions import STEP, CheckingClient, SimSlurm

START = 1_795_240_000


def test_the_promise_goes_before_the_users_comment_and_comes_off_whole() -> None:
    shown = with_promise("my note | with a bar", START)
    assert shown == f"{MARKER}{slurm_time(START)} | my note | with a bar"
    assert shown.startswith("hpcdispatch: starts by ")
    assert users_comment(shown) == "my note | with a bar"
    assert with_promise(shown, START - 60) == with_promise("my note | with a bar", START - 60)
    assert with_promise("", START) == MARKER + slurm_time(START)
    assert users_comment(with_promise("", START)) == ""
    assert users_comment("a note of the user's own") == "a note of the user's own"
    assert slurm_time(START) == time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(START))


def test_the_comment_says_starts_by_the_promise_and_likely_the_plan() -> None:
    """"starts by <promise>, likely <likely start>", in Slurm's time format; no "likely" when
    the decision gave none (or one no earlier than the promise); an older bridge's text is
    recognised and replaced whole."""
    likely = START - 5400
    shown = with_promise("my note", START, likely)
    assert shown == (f"hpcdispatch: starts by {slurm_time(START)}, likely {slurm_time(likely)}"
                     " | my note")
    assert users_comment(shown) == "my note"
    assert with_promise("", START, None) == f"hpcdispatch: starts by {slurm_time(START)}"
    assert with_promise("", START, START) == with_promise("", START)
    older = f"hpcdispatch: promised start {slurm_time(START)} | my note"
    assert shows_promise(older) and users_comment(older) == "my note"
    assert with_promise(older, START, likely) == shown


def test_only_changed_comments_are_written_and_a_started_job_loses_its_promise() -> None:
    doc = FakeSlurm().squeue_doc
    jobs = parse_jobs(doc)
    held = [j.id for j in jobs if j.held]
    running = [j for j in jobs if j.state == "RUNNING"]
    assert held and running
    updates = comment_updates(jobs, {held[0]: START}, released=())
    assert updates == {held[0]: MARKER + slurm_time(START)}
    # Written already: nothing to do; a running job showing a promise gets its comment back.
    shown = [dataclasses.replace(j, comment=updates[j.id]) if j.id == held[0] else j
             for j in jobs]
    assert comment_updates(shown, {held[0]: START}, released=()) == {}
    started = [dataclasses.replace(running[0], comment=with_promise("mine", START))]
    assert comment_updates(started, {}, released=()) == {running[0].id: "mine"}
    assert comment_updates(started, {}, released={running[0].id}) == {}


@pytest.fixture(scope="module")
def book_server() -> Iterator[RunningServer]:
    running = start_server(ServerConfig(listen="127.0.0.1:0", default_dispatcher="pcp20"))
    yield running
    running.stop(1.0)


def test_held_jobs_show_their_promise_until_released_on_every_cycle(
    book_server: RunningServer,
) -> None:
    slurm = SimSlurm()
    # Each needs the whole cluster (3 nodes x 4 CPUs): one runs at a time, the others wait.
    jobs = [slurm.submit(12, duration=25, limit_min=1) for _ in range(4)]
    slurm.jobs[jobs[2]].comment = "my own note"
    metrics = BridgeMetrics()
    with DispatcherClient(book_server.target, timeout=30.0) as client:
        bridge = Bridge(BridgeConfig(frozenset({"batch"}), interval=STEP, profile="book",
                                     promise_after_s=0, predictor=pb.PREDICTOR_WALLTIME),
                        slurm, CheckingClient(client, slurm), metrics,
                        clock=lambda: slurm.now)
        shown: dict[str, set[str]] = {j: set() for j in jobs}
        with capture_logs() as logs:
            for k in range(20):
                slurm.tick(slurm.now + (STEP if k else 0))
                result = bridge.cycle()
                assert result.ok, result
                for job_id in jobs:
                    job = slurm.jobs[job_id]
                    if job.state == "PENDING" and job.reason.startswith("JobHeld"):
                        # Every held job holds a promise (the ladder's first rung).
                        start = result.promised[job_id]
                        assert job.comment == with_promise(
                            "my own note" if job_id == jobs[2] else "", start,
                            result.likely.get(job_id)), job_id
                        shown[job_id].add(job.comment)
                    else:  # released, running or done: the user's own comment only
                        assert job.comment == ("my own note" if job_id == jobs[2] else "")
                if all(slurm.jobs[j].state == "COMPLETED" for j in jobs):
                    break
        bridge.close_session()
    assert slurm.violations == []
    assert all(slurm.jobs[j].state == "COMPLETED" for j in jobs), {
        j: slurm.jobs[j].state for j in jobs}
    assert all(shown[j] for j in jobs[1:]), shown  # each waiting job showed a promise
    written = metrics.registry.get_sample_value(
        "hpcdispatch_bridge_promise_comments_total", {"action": "shown"})
    assert written is not None and written >= 3
    # Only changes are written: no more updates than distinct texts shown.
    assert written == sum(len(texts) for texts in shown.values())
    assert not [e for e in logs if e["event"] == "promise_comment_failed"]


def test_dry_run_and_the_flag_write_no_comment(book_server: RunningServer) -> None:
    for config in (BridgeConfig(frozenset({"batch"}), profile="book", promise_after_s=0,
                                dry_run=True),
                   bridge_cli.config_from_args(bridge_cli_args(
                       "--no-promise-comments", "--promise-after", "0"))):
        slurm = SimSlurm()
        for _ in range(3):
            slurm.submit(12, duration=25, limit_min=1)
        with DispatcherClient(book_server.target, timeout=30.0) as client:
            bridge = Bridge(config, slurm, CheckingClient(client, slurm),
                            clock=lambda t=slurm.now: t, out=lambda s: None)
            result = bridge.cycle()
            bridge.close_session()
        assert result.ok and len(result.promised) == 2
        assert all(job.comment == "" for job in slurm.jobs.values())


def bridge_cli_args(*flags: str) -> object:
    import argparse

    parser = argparse.ArgumentParser()
    bridge_cli.register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["slurm-bridge", "--partition", "batch", "--profile", "book",
                              *flags])


def test_a_failed_comment_update_is_counted_and_changes_no_decision() -> None:
    slurm = FakeSlurm()
    slurm.fail.add("comment")
    held = [j.id for j in parse_jobs(slurm.squeue_doc) if j.held]

    class Promising:
        def dispatch(self, request: pb.DispatchRequest,
                     timeout: float | None = None) -> pb.DispatchResponse:
            response = pb.DispatchResponse(time=request.time)
            for job_id in held:
                response.report.expected_starts.add(job_id=job_id,
                                                    start_time=request.time + 600,
                                                    promised=True)
            return response

        def report_completions(self, *args: object, **kwargs: object) -> int:
            return 0

    metrics = BridgeMetrics()
    bridge = Bridge(BridgeConfig(frozenset({"batch"}), full_snapshots=True,
                                 report_completions=False), slurm, Promising(), metrics)
    result = bridge.cycle()
    assert result.ok and set(result.promised) == set(held)
    assert metrics.registry.get_sample_value(
        "hpcdispatch_bridge_errors_total", {"kind": "slurm_command"}) == len(held)
    slurm.fail.clear()
    assert bridge.cycle().ok
    assert set(slurm.comments) == set(held)
    assert all(c.startswith(MARKER) for c in slurm.comments.values())


def test_the_bridge_writes_the_likely_start_beside_the_promise() -> None:
    """The decision's promise (start_time) and likely start (likely_start) of each held job
    reach its Comment as "starts by ..., likely ..."; a promise without a likely start shows
    "starts by" alone."""
    slurm = FakeSlurm()
    held = [j.id for j in parse_jobs(slurm.squeue_doc) if j.held]
    assert len(held) >= 2

    class Promising:
        def dispatch(self, request: pb.DispatchRequest,
                     timeout: float | None = None) -> pb.DispatchResponse:
            response = pb.DispatchResponse(time=request.time)
            first = response.report.expected_starts.add(
                job_id=held[0], start_time=request.time + 7200, promised=True)
            first.likely_start = request.time + 1800
            response.report.expected_starts.add(
                job_id=held[1], start_time=request.time + 9000, promised=True)
            return response

        def report_completions(self, *args: object, **kwargs: object) -> int:
            return 0

    bridge = Bridge(BridgeConfig(frozenset({"batch"}), full_snapshots=True,
                                 report_completions=False), slurm, Promising(), BridgeMetrics())
    result = bridge.cycle()
    assert result.ok and result.likely == {held[0]: result.promised[held[0]] - 5400}
    assert slurm.comments[held[0]] == (
        f"hpcdispatch: starts by {slurm_time(result.promised[held[0]])}, "
        f"likely {slurm_time(result.promised[held[0]] - 5400)}")
    assert slurm.comments[held[1]] == (
        f"hpcdispatch: starts by {slurm_time(result.promised[held[1]])}")


def test_the_promise_rung_reaches_every_request() -> None:
    """`--promise-after 0` (the ladder's first rung) is asked of the service with each
    decision; without it the profile's own rung applies (the request leaves it unset)."""
    slurm = FakeSlurm()
    asked: list[pb.DispatchRequest] = []

    class Recording:
        def dispatch(self, request: pb.DispatchRequest,
                     timeout: float | None = None) -> pb.DispatchResponse:
            asked.append(request)
            return pb.DispatchResponse(time=request.time)

        def report_completions(self, *args: object, **kwargs: object) -> int:
            return 0

    for flags, expected in (((), None), (("--promise-after", "0"), 0)):
        config = bridge_cli.config_from_args(bridge_cli_args(*flags))
        assert config.promise_after_s == expected
        config = dataclasses.replace(config, full_snapshots=True, report_completions=False)
        Bridge(config, slurm, Recording(), BridgeMetrics()).cycle()
        search = asked[-1].search
        assert search.profile == "book"
        assert (search.promise_after_s if search.HasField("promise_after_s") else None) == expected
