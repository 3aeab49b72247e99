"""Unit tests of the Slurm bridge: parsing real 22.05 JSON, snapshot building, the resource
mapping, and the loop's behaviour (dry run, unreachable service, failing Slurm commands,
stopping mid-decision, reconciliation) with Slurm replaced by captured output."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Iterable
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from hpcdispatch.client import DispatcherClient
from hpcdispatch.proto_convert import snapshot_to_pb
from hpcdispatch.server.config import load_config
from hpcdispatch.server.intake.validation import validate_dispatch_request
from hpcdispatch.slurm_bridge import cli as bridge_cli
from hpcdispatch.slurm_bridge.bridge import Bridge, BridgeConfig
from hpcdispatch.slurm_bridge.job_units import (
    UnplaceableError,
    placement_for,
    unit_shape,
)
from hpcdispatch.slurm_bridge.metrics import BridgeMetrics
from hpcdispatch.slurm_bridge.slurm_cli import SlurmCommandError, SlurmCommands
from hpcdispatch.slurm_bridge.slurm_json import expand_hostlist, parse_jobs, parse_nodes
from hpcdispatch.slurm_bridge.snapshot_builder import BuilderSettings, InFlight, build_snapshot
from hpcdispatch.snapshot import NodeState
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.paths import DATA as TEST_DATA

DATA = TEST_DATA / "slurm"
SETTINGS = BuilderSettings(frozenset({"batch"}))


def load(name: str) -> dict[str, Any]:
    return dict(json.loads((DATA / name).read_text()))


# -- parsing and snapshot building ----------------------------------------------------------


def test_parse_real_sinfo() -> None:
    nodes = parse_nodes(load("sinfo_up.json"))
    assert [n.name for n in nodes] == ["n1", "n2", "n3"]
    assert {(n.cpus, n.real_memory, n.partitions) for n in nodes} == {(4, 2000, ("batch",))}


@pytest.mark.parametrize(("fixture", "state"), [
    ("sinfo_up.json", NodeState.UP),
    ("sinfo_n3_down.json", NodeState.DOWN),
    ("sinfo_n3_drained.json", NodeState.DRAINED),
])
def test_node_states(fixture: str, state: NodeState) -> None:
    built = build_snapshot(parse_nodes(load(fixture)), [], SETTINGS, now=2_000_000_000)
    states = {n.id: n.state for n in built.snapshot.nodes}
    assert states["n3"] is state
    assert states["n1"] is NodeState.UP


def test_snapshot_from_held_and_running_jobs() -> None:
    nodes = parse_nodes(load("sinfo_up.json"))
    jobs = parse_jobs(load("squeue_held_and_running.json"))
    now = max(j.submit_time for j in jobs) + 10
    built = build_snapshot(nodes, jobs, SETTINGS, now)
    snap = built.snapshot
    assert {n.id: dict(n.capacity) for n in snap.nodes} == {
        f"n{i}": {"core": 4, "mem": 2000} for i in (1, 2, 3)
    }
    (running,) = snap.running
    assert running.id == "3"
    assert [(u.node_id, dict(u.amounts)) for u in running.units] == [
        ("n1", {"core": 2, "mem": 300})
    ]
    queued = {q.id: q for q in snap.queued}
    assert set(queued) == {"1", "2"}
    # -n 3 (DefMemPerCPU=100): three one-core units.
    assert (queued["1"].units, dict(queued["1"].unit_request)) == (3, {"core": 1, "mem": 100})
    assert queued["1"].requested_time == 5 * 60
    # -N 2 --ntasks-per-node=2 --mem-per-cpu=200: one unit per node of 2 cores, 400 MiB.
    assert (queued["2"].units, dict(queued["2"].unit_request)) == (2, {"core": 2, "mem": 400})
    assert built.shapes["2"].one_per_node
    assert all(q.submit_time <= now for q in snap.queued)


def test_snapshot_ignores_other_partitions_and_can_drop_memory() -> None:
    nodes = parse_nodes(load("sinfo_up.json"))
    jobs = parse_jobs(load("squeue_held_and_running.json"))
    other = build_snapshot(nodes, jobs, BuilderSettings(frozenset({"gpu"})), 2_000_000_000)
    assert other.snapshot.nodes == () and other.snapshot.queued == ()
    no_mem = build_snapshot(nodes, jobs, BuilderSettings(frozenset({"batch"}), False),
                            2_000_000_000)
    assert all(set(n.capacity) == {"core"} for n in no_mem.snapshot.nodes)
    assert all(set(q.unit_request) == {"core"} for q in no_mem.snapshot.queued)


def test_cpus_per_task_is_derived_and_released_jobs_hold_their_nodes() -> None:
    nodes = parse_nodes(load("sinfo_n1_full.json"))
    jobs = {j.id: j for j in parse_jobs(load("squeue_cpus_per_task_and_pinned.json"))}
    # 22.05 prints cpus_per_task null for `-n 2 -c 2`; cpus/tasks gives it back.
    assert jobs["12"].cpus_per_task == 2
    assert jobs["13"].required_nodes == ("n1",) and not jobs["13"].held
    # (Planned on n2: job 11 fills n1, see the next test.)
    flight = InFlight("13", ("n2",), {"core": 1, "mem": 100}, 2_000_000_000 - 5, 180)
    built = build_snapshot(nodes, list(jobs.values()), SETTINGS, 2_000_000_000,
                           {"13": flight})
    running = {r.id: r for r in built.snapshot.running}
    assert [(u.node_id, dict(u.amounts)) for u in running["13"].units] == [
        ("n2", {"core": 1, "mem": 100})
    ]
    assert built.unfit == {}
    assert [(u.node_id, u.amounts["core"]) for u in running["11"].units] == [("n1", 4)]
    (queued,) = built.snapshot.queued
    assert (queued.id, queued.units, queued.unit_request["core"]) == ("12", 2, 2)
    # Without the bridge's record, a released job is neither queued nor running.
    bare = build_snapshot(nodes, list(jobs.values()), SETTINGS, 2_000_000_000)
    assert "13" not in {r.id for r in bare.snapshot.running}


def test_released_jobs_that_no_longer_fit_are_not_reserved_in_release_order() -> None:
    nodes = parse_nodes(load("sinfo_n1_full.json"))  # job 11 really holds all 4 CPUs of n1
    jobs = parse_jobs(load("squeue_cpus_per_task_and_pinned.json"))
    (pending,) = [j for j in jobs if j.id == "13"]
    jobs += [dataclasses.replace(pending, id=i) for i in ("14", "15", "16", "17")]
    t = 2_000_000_000

    def flight(job_id: str, nodes: tuple[str, ...], mem: int = 100) -> InFlight:
        return InFlight(job_id, nodes, {"core": 1, "mem": mem}, t - 5, 180)

    in_flight = {  # release order, not squeue's
        "14": flight("14", ("n2", "n2", "n2")),
        "13": flight("13", ("n2", "n2")),  # 3 + 2 CPUs on n2: no longer fits
        "15": flight("15", ("n3",), mem=1500),
        "16": flight("16", ("n3",), mem=600),  # 2100 MiB on n3: no longer fits
        "17": flight("17", ("n1",)),  # n1 is full with job 11
    }
    built = build_snapshot(nodes, jobs, SETTINGS, t, in_flight)
    assert built.unfit == {"13": ["n2"], "16": ["n3"], "17": ["n1"]}
    assert [r.id for r in built.snapshot.running] == ["11", "14", "15"]
    assert [q.id for q in built.snapshot.queued] == ["12"]
    # The service takes the snapshot (reserving 13, 16 or 17 too over-commits a node).
    assert validate_dispatch_request(snapshot_to_pb(built.snapshot), load_config(env={}),
                                     [pb.PREDICTOR_UNSPECIFIED]) == []


def test_expand_hostlist() -> None:
    assert expand_hostlist("n[1-3,7],gpu01") == ("n1", "n2", "n3", "n7", "gpu01")
    assert expand_hostlist("node[08-10]") == ("node08", "node09", "node10")
    assert expand_hostlist("") == ()


def test_placement_rules() -> None:
    jobs = {j.id: j for j in parse_jobs(load("squeue_held_and_running.json"))}
    tasks = unit_shape(jobs["1"], True, 2000)
    p = placement_for(tasks, ["n2", "n1", "n2"])
    assert (p.node_list, p.num_nodes) == ("n1,n2", 2)
    per_node = unit_shape(jobs["2"], True, 2000)
    assert placement_for(per_node, ["n3", "n1"]).node_list == "n1,n3"
    with pytest.raises(UnplaceableError):
        placement_for(per_node, ["n1", "n1"])
    with pytest.raises(UnplaceableError):
        placement_for(tasks, ["n1"])


# -- the loop with Slurm replaced by captured output ----------------------------------------


class FakeSlurm(SlurmCommands):
    """Serves captured JSON; records every scontrol action; can be told to fail."""

    def __init__(self, squeue: str = "squeue_held_and_running.json",
                 sinfo: str = "sinfo_up.json") -> None:
        super().__init__()
        self.squeue_doc, self.sinfo_doc = load(squeue), load(sinfo)
        self.actions: list[tuple[str, str]] = []
        self.fail: set[str] = set()  # that fail: "read", "pin", "release", "hold", "comment"
        self.on_pin: Any = None
        self.comments: dict[str, str] = {}  # job id -> the Comment last written
        self.reservations_text = ""  # `scontrol show reservation -o`

    def _maybe_fail(self, what: str) -> None:
        if what in self.fail:
            raise SlurmCommandError(["scontrol", what], "exit 1: slurm_load_jobs error")

    def squeue(self) -> dict[str, Any]:
        self._maybe_fail("read")
        return self.squeue_doc

    def sinfo(self) -> dict[str, Any]:
        self._maybe_fail("read")
        return self.sinfo_doc

    def reservations(self) -> str:
        self._maybe_fail("read")
        return self.reservations_text

    def pin(self, job_id: str, node_list: str, num_nodes: int | None,
            comment: str | None = None) -> None:
        self._maybe_fail("pin")
        self.actions.append(("pin", job_id))
        if comment is not None:
            self.comments[job_id] = comment
        if self.on_pin is not None:
            self.on_pin(job_id)

    def set_comment(self, job_id: str, comment: str) -> None:
        self._maybe_fail("comment")
        self.comments[job_id] = comment

    def release(self, job_id: str) -> None:
        self._maybe_fail("release")
        self.actions.append(("release", job_id))

    def hold(self, job_id: str) -> None:
        self._maybe_fail("hold")
        self.actions.append(("hold", job_id))

    def unpin(self, job_id: str) -> None:
        self.actions.append(("unpin", job_id))


class FakeService:
    """Answers with fixed placements (job id -> node of each unit)."""

    def __init__(self, starts: dict[str, list[str]]) -> None:
        self.starts = starts
        self.requests: list[pb.DispatchRequest] = []
        self.completions: list[pb.JobCompletion] = []

    def dispatch(self, request: pb.DispatchRequest, timeout: float | None = None) -> (
        pb.DispatchResponse
    ):
        self.requests.append(request)
        response = pb.DispatchResponse(time=request.time)
        for job in request.queued_jobs:
            if job.id in self.starts:
                start = response.starts.add(job_id=job.id, expected_duration=60)
                for node in self.starts[job.id]:
                    start.units.add(node_id=node, amounts=dict(job.unit_request))
        return response

    def report_completions(self, completions: Iterable[pb.JobCompletion], cluster: str = "",
                           timeout: float | None = None) -> int:
        batch = list(completions)
        self.completions += batch
        return len(batch)


NOW = 1_795_236_300  # a little after the fixtures were captured
GOOD = {"1": ["n2", "n2", "n3"], "2": ["n2", "n3"]}  # fits next to job 3 (2 cores on n1)


def make_bridge(slurm: FakeSlurm, service: Any, **config: Any) -> Bridge:
    cfg = BridgeConfig(frozenset({"batch"}), **{"interval": 1.0, **config})
    return Bridge(cfg, slurm, service, BridgeMetrics(), clock=lambda: NOW, out=lambda s: None)


def test_cycle_pins_then_releases_each_job_and_sends_the_snapshot() -> None:
    slurm, service = FakeSlurm(), FakeService(GOOD)
    bridge = make_bridge(slurm, service, dispatcher=pb.DISPATCHER_EASY)
    result = bridge.cycle()
    assert result.ok and result.released == ["1", "2"]
    assert slurm.actions == [("pin", "1"), ("release", "1"), ("pin", "2"), ("release", "2")]
    (request,) = service.requests
    assert request.dispatcher == pb.DISPATCHER_EASY
    assert {j.id for j in request.queued_jobs} == {"1", "2"}
    assert [j.id for j in request.running_jobs] == ["3"]
    assert set(bridge.in_flight) == {"1", "2"}
    assert bridge.metrics.registry.get_sample_value(
        "hpcdispatch_bridge_jobs_released_total") == 2


def test_dry_run_prints_and_changes_nothing() -> None:
    printed: list[str] = []
    slurm = FakeSlurm()
    bridge = make_bridge(slurm, FakeService(GOOD), dry_run=True)
    bridge.out = printed.append
    assert bridge.run(once=True) == 0
    assert slurm.actions == []
    assert printed == ["dry-run: would start job 1 on n2,n3 (units on n2,n2,n3)",
                       "dry-run: would start job 2 on n2,n3 (units on n2,n3)"]


def test_unreachable_service_keeps_jobs_held_and_backs_off() -> None:
    slurm = FakeSlurm()
    client = DispatcherClient("127.0.0.1:1", timeout=0.5, retries=2)
    bridge = make_bridge(slurm, client, dispatch_timeout=0.5, max_backoff=5.0)
    try:
        with capture_logs() as logs:
            waits = []
            for _ in range(4):
                result = bridge.cycle()
                assert not result.ok and result.error_kind == "service_unavailable"
                waits.append(bridge.next_wait(result))
    finally:
        client.close()
    assert slurm.actions == []  # nothing pinned or released: the jobs stay held
    assert waits == [2.0, 4.0, 5.0, 5.0]
    events = [e["event"] for e in logs]
    assert "dispatch_failed_jobs_stay_held" in events and "retry_with_backoff" in events
    assert bridge.metrics.registry.get_sample_value(
        "hpcdispatch_bridge_errors_total", {"kind": "service_unavailable"}) == 4
    assert bridge.session is not None and bridge.session.opens == 0  # sessions by default
    # Once the service answers, the wait is the interval again.
    bridge.service, bridge.session = FakeService(GOOD), None
    assert bridge.next_wait(bridge.cycle()) == 1.0


def test_failing_slurm_read_is_logged_and_retried() -> None:
    slurm = FakeSlurm()
    slurm.fail.add("read")
    bridge = make_bridge(slurm, FakeService(GOOD))
    with capture_logs() as logs:
        assert bridge.run(once=True) == 1
        result = bridge.cycle()
    assert result.error_kind == "slurm_command"
    assert any(e["event"] == "slurm_read_failed" for e in logs)
    slurm.fail.clear()
    assert bridge.cycle().ok


def test_failing_release_logs_the_half_applied_job() -> None:
    slurm = FakeSlurm()
    slurm.fail.add("release")
    bridge = make_bridge(slurm, FakeService(GOOD))
    with capture_logs() as logs:
        result = bridge.cycle()
    assert result.left_held == ["1", "2"] and result.released == []
    half = [e for e in logs if e["event"] == "half_applied_pinned_not_released"]
    assert [e["job_id"] for e in half] == ["1", "2"]
    assert bridge.in_flight == {}


def test_stop_finishes_the_job_in_progress_and_names_the_rest() -> None:
    slurm = FakeSlurm()
    bridge = make_bridge(slurm, FakeService(GOOD))
    slurm.on_pin = lambda job_id: bridge.request_stop()  # SIGTERM arrives during job 1
    with capture_logs() as logs:
        bridge.run()
    assert slurm.actions == [("pin", "1"), ("release", "1")]
    (left,) = [e for e in logs if e["event"] == "stop_requested_jobs_left_held"]
    assert left["jobs"] == ["2"]


def test_decision_over_capacity_is_not_applied() -> None:
    slurm = FakeSlurm()
    bad = {"1": ["n1", "n1", "n1"]}  # n1 already runs job 3 on 2 of its 4 cores
    bridge = make_bridge(slurm, FakeService(bad))
    result = bridge.cycle()
    assert result.error_kind == "invalid_decision" and slurm.actions == []


def test_stacked_units_of_a_per_node_job_stay_held() -> None:
    slurm = FakeSlurm()
    bridge = make_bridge(slurm, FakeService({"2": ["n2", "n2"]}))
    result = bridge.cycle()
    assert result.ok and result.left_held == ["2"] and slurm.actions == []


def test_released_job_on_a_down_node_is_held_again() -> None:
    slurm = FakeSlurm("squeue_cpus_per_task_and_pinned.json", "sinfo_n3_down.json")
    bridge = make_bridge(slurm, FakeService({}))
    bridge.in_flight["13"] = InFlight("13", ("n3",), {"core": 1}, NOW - 1, 180)
    with capture_logs() as logs:
        bridge.cycle()
    assert ("hold", "13") in slurm.actions and ("unpin", "13") in slurm.actions
    assert "13" not in bridge.in_flight
    assert any(e["event"] == "reconcile_node_unavailable" for e in logs)


def test_released_job_not_started_in_time_is_held_again_and_pinned_jobs_are_adopted() -> None:
    slurm = FakeSlurm("squeue_cpus_per_task_and_pinned.json", "sinfo_n1_full.json")
    # Without job 11 (all of n1), job 13 still fits its pinned node (next test: it does not).
    slurm.squeue_doc["jobs"] = [j for j in slurm.squeue_doc["jobs"] if j["job_id"] != 11]
    bridge = make_bridge(slurm, FakeService({}), start_timeout=30)
    bridge.cycle()  # a restarted bridge finds job 13 pinned and released: it adopts it
    assert set(bridge.in_flight) == {"13"} and slurm.actions == []
    bridge.clock = lambda: NOW + 60
    bridge.cycle()
    assert slurm.actions == [("hold", "13"), ("unpin", "13")]


def test_released_job_that_no_longer_fits_is_held_again_and_decided_at_once() -> None:
    # Job 13 is pinned to n1 and released (adopted: the bridge restarted), but job 11 really
    # holds all of n1: reserving 13 there would over-commit n1 and the service would refuse
    # the snapshot. The bridge holds it again and it is queued in the same cycle's snapshot.
    slurm = FakeSlurm("squeue_cpus_per_task_and_pinned.json", "sinfo_n1_full.json")
    slurm.fail.add("hold")
    service = FakeService({"13": ["n2"]})
    bridge = make_bridge(slurm, service)
    with capture_logs() as logs:
        assert bridge.cycle().ok
    # scontrol hold failed: 13 stays in flight, but is neither reserved nor queued.
    (request,) = service.requests
    assert [j.id for j in request.running_jobs] == ["11"]
    assert [j.id for j in request.queued_jobs] == ["12"]
    assert set(bridge.in_flight) == {"13"} and slurm.actions == []
    (failed,) = [e for e in logs if e["event"] == "rehold_failed"]
    assert failed["kind"] == "no_longer_fits"

    slurm.fail.clear()
    with capture_logs() as logs:
        result = bridge.cycle()
    assert result.ok and result.released == ["13"]
    assert slurm.actions == [("hold", "13"), ("unpin", "13"), ("pin", "13"), ("release", "13")]
    request = service.requests[-1]
    assert [j.id for j in request.running_jobs] == ["11"]
    assert [j.id for j in request.queued_jobs] == ["12", "13"]
    (event,) = [e for e in logs if e["event"] == "reconcile_no_longer_fits"]
    assert (event["job_id"], event["nodes"], event["log_level"]) == ("13", ["n1"], "warning")
    assert bridge.metrics.registry.get_sample_value(
        "hpcdispatch_bridge_reconciliations_total", {"kind": "no_longer_fits"}) == 1
    assert bridge.in_flight["13"].unit_nodes == ("n2",)


def test_started_job_is_checked_against_the_plan() -> None:
    slurm = FakeSlurm("squeue_pinned_running.json")
    bridge = make_bridge(slurm, FakeService({}))
    bridge.in_flight["5"] = InFlight("5", ("n1", "n2", "n2"), {"core": 1}, NOW - 5, 300)
    bridge.in_flight["4"] = InFlight("4", ("n3",), {"core": 1}, NOW - 5, 300)
    with capture_logs() as logs:
        bridge.cycle()
    assert not {"4", "5"} & set(bridge.in_flight)  # job 2 (pinned, pending) is adopted
    events = {e["event"]: e for e in logs}
    assert events["reconcile_started_elsewhere"]["job_id"] == "4"
    assert "reconcile_layout_differs" not in events  # job 5 got 1 + 2 CPUs, as planned


def test_completions_are_reported_once() -> None:
    slurm = FakeSlurm("squeue_completed.json")
    service = FakeService({})
    bridge = make_bridge(slurm, service)
    bridge.started_at = 0
    bridge.cycle()
    bridge.cycle()
    done = {c.job_id: c for c in service.completions}
    assert set(done) == {"1", "3", "4", "5"}
    assert done["1"].end_time - done["1"].start_time == 60
    assert done["1"].units == 3


def test_register_adds_the_subcommand() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    bridge_cli.register(sub)
    args = parser.parse_args(["slurm-bridge", "--target", "h:1", "--partition", "a",
                              "--partition", "b", "--dry-run", "--once",
                              "--dispatcher", "pcp20", "--metrics-port", "9200"])
    assert args.func is bridge_cli.run
    assert (args.partitions, args.dry_run, args.once, args.dispatcher, args.metrics_port) == (
        ["a", "b"], True, True, "pcp20", 9200)
    structlog.reset_defaults()
