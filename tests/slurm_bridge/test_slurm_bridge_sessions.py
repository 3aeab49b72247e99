"""The Slurm bridge deciding through a session, against a real service on loopback.

Slurm is simulated (`SimSlurm`: 3 nodes × 4 CPUs / 2000 MiB, real 22.05 JSON for squeue/sinfo,
scontrol pin / release / hold acting on its jobs, released jobs started at the next tick on their
pinned nodes, jobs ending after their run time); the service is a real gRPC server. One scripted
run of ~20 cycles: three waves of jobs, a cancellation, a node drained right after the bridge
released a job onto it (the job is held again and decided again), completions reported.

Checked: by default the bridge decides through one session (the server sees one OpenSession, an
UpdateSession per later decision, no Dispatch, no resync) and gets the same decisions, releases
and job outcomes as with `full_snapshots` (the server sees only Dispatch); the session is closed
when the bridge stops; a service without sessions gets full snapshots; a server restarted
between two cycles is survived through one resync, counted in the bridge's metrics, with the
same outcome as an uninterrupted run; every decision is checked independently and every
released job fits its nodes when Slurm starts it.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
import pytest
import structlog
from structlog.testing import capture_logs

from hpcdispatch.client import DispatcherClient, DispatchSession
from hpcdispatch.decision_check import check_decision
from hpcdispatch.proto_convert import decision_from_pb, snapshot_from_pb
from hpcdispatch.server.config import load_config
from hpcdispatch.server.rpc.app import RunningServer, start_server
from hpcdispatch.server.rpc.metrics import code_label
from hpcdispatch.server.sessions.store import SESSION_ID
from hpcdispatch.slurm_bridge import cli as bridge_cli
from hpcdispatch.slurm_bridge.bridge import Bridge, BridgeConfig, DecisionSession
from hpcdispatch.slurm_bridge.metrics import BridgeMetrics
from hpcdispatch.slurm_bridge.slurm_cli import SlurmCommands
from hpcdispatch.slurm_bridge.slurm_json import expand_hostlist
from hpcdispatch.slurm_bridge.snapshot_builder import keep_order
from hpcdispatch.snapshot import Node, NodeState, QueuedJob, Snapshot
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc

NODES = ("n1", "n2", "n3")
CPUS, MEMORY = 4, 2000
T0 = 1_795_236_300
STEP = 10  # seconds between cycles
SESSION = "hpcdispatch.v1.SessionService"
DISPATCH = "hpcdispatch.v1.DispatcherService"


# -- a simulated Slurm ----------------------------------------------------------------------


@dataclass
class SimJob:
    id: str
    tasks: int
    cpus_per_task: int
    tasks_per_node: int  # 0: none given
    node_count: int
    mem_per_cpu: int
    limit_min: int
    duration: int
    submit_time: int
    state: str = "PENDING"
    reason: str = "JobHeldUser"
    required: str = ""
    start_time: int = 0
    end_time: int = 0
    alloc: dict[str, int] = field(default_factory=dict)  # node -> CPUs
    comment: str = ""

    def cpus_per_unit(self) -> int:
        return (self.tasks_per_node or 1) * self.cpus_per_task


class SimSlurm(SlurmCommands):
    """squeue/sinfo as Slurm 22.05 prints them; scontrol acting on the jobs; `tick` advances.

    A released job starts at the next tick on exactly its pinned nodes, with the decided number
    of units on each (`planned`, from the decisions the service sent), or stays pending when a
    pinned node is drained. A released job that does not fit its free nodes is recorded in
    `violations`: the service's decision (checked by the bridge against its snapshot) was
    wrong, or the bridge forgot a job it released.

    `layouts` makes Slurm lay a released job out its own way (units per node, on any nodes),
    as real Slurm may; such a job is "off plan". While an off-plan job runs, a released job that
    does not fit its planned layout is not a violation: it stays pending (`Resources`), as in
    Slurm, and the bridge must not reserve its planned units.
    """

    def __init__(self) -> None:
        super().__init__()
        self.now = T0
        self.jobs: dict[str, SimJob] = {}
        self.drained: set[str] = set()
        self.actions: list[tuple[str, str]] = []
        self.violations: list[str] = []
        self.planned: dict[str, Counter[str]] = {}  # job -> units per node, as decided
        self.layouts: dict[str, Counter[str]] = {}  # job -> units per node, Slurm's own choice
        self.off_plan: set[str] = set()  # jobs started on a layout of their own
        self._next_id = 100

    # -- what a user or admin does --

    def submit(self, tasks: int, *, cpus_per_task: int = 1, tasks_per_node: int = 0,
               mem_per_cpu: int = 100, duration: int = 30, limit_min: int = 2) -> str:
        self._next_id += 1
        job_id = str(self._next_id)
        nodes = tasks // tasks_per_node if tasks_per_node else 1
        self.jobs[job_id] = SimJob(job_id, tasks, cpus_per_task, tasks_per_node, nodes,
                                   mem_per_cpu, limit_min, duration, self.now)
        return job_id

    def cancel(self, job_id: str) -> None:
        job = self.jobs[job_id]
        if job.state in ("PENDING", "RUNNING"):
            job.state, job.reason, job.end_time = "CANCELLED", "None", self.now

    def tick(self, now: int) -> None:
        self.now = now
        for job in self.jobs.values():
            if job.state == "RUNNING" and job.start_time + job.duration <= now:
                job.state, job.end_time = "COMPLETED", job.start_time + job.duration
        for job in self.jobs.values():
            if (job.state == "PENDING" and job.reason in ("None", "Resources")
                    and job.required):
                self._start(job)

    def _free(self) -> dict[str, list[int]]:
        free = {n: [CPUS, MEMORY] for n in NODES}
        for job in self.jobs.values():
            if job.state == "RUNNING":
                for node, cpus in job.alloc.items():
                    free[node][0] -= cpus
                    free[node][1] -= cpus * job.mem_per_cpu
        return free

    def _start(self, job: SimJob) -> None:
        nodes = expand_hostlist(job.required)
        if set(nodes) & self.drained:
            job.reason = "ReqNodeNotAvail"
            return
        free = self._free()
        unit_cpus = job.cpus_per_unit()
        fits = {n: min(free[n][0] // unit_cpus, free[n][1] // (unit_cpus * job.mem_per_cpu))
                for n in nodes}
        layout = self.planned.get(job.id, Counter())
        own = self.layouts.pop(job.id, None)
        if own is not None:
            fits = {n: min(free[n][0] // unit_cpus, free[n][1] // (unit_cpus * job.mem_per_cpu))
                    for n in own}
            if any(fits[n] < c for n, c in own.items()):
                self.violations.append(f"test set-up: job {job.id} does not fit {dict(own)}")
                return
            self.off_plan.add(job.id)
            layout = own
        elif set(layout) != set(nodes) or any(fits[n] < c for n, c in layout.items()):
            if any(self.jobs[j].state == "RUNNING" for j in self.off_plan):
                job.reason = "Resources"  # Slurm waits; the bridge holds it again
                return
            self.violations.append(f"job {job.id} does not fit {job.required}: free {free}")
            return
        job.state, job.reason, job.start_time = "RUNNING", "None", self.now
        job.alloc = {n: c * unit_cpus for n, c in layout.items()}

    # -- the commands the bridge runs --

    def squeue(self) -> dict[str, Any]:
        return {"meta": {}, "errors": [], "jobs": [self._job_doc(j) for j in self.jobs.values()]}

    def reservations(self) -> str:
        return "No reservations in the system\n"

    def sinfo(self) -> dict[str, Any]:
        used = {n: CPUS - cpus for n, (cpus, _) in self._free().items()}
        return {"meta": {}, "errors": [], "nodes": [
            {"name": n, "state": "idle" if not used[n] else
             "allocated" if used[n] == CPUS else "mixed",
             "state_flags": ["DRAIN"] if n in self.drained else [], "partitions": ["batch"],
             "cpus": CPUS, "real_memory": MEMORY, "threads": 1}
            for n in NODES]}

    def _job_doc(self, job: SimJob) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "job_id": int(job.id), "name": f"job{job.id}", "user_name": "alice",
            "job_state": job.state, "state_reason": job.reason, "partition": "batch",
            "submit_time": job.submit_time, "start_time": job.start_time,
            "end_time": job.end_time, "time_limit": job.limit_min,
            "cpus": job.tasks * job.cpus_per_task, "tasks": job.tasks,
            "cpus_per_task": job.cpus_per_task, "tasks_per_node": job.tasks_per_node,
            "node_count": job.node_count, "memory_per_cpu": job.mem_per_cpu,
            "memory_per_node": None, "required_nodes": job.required,
            "array_task_id": None, "array_task_string": "", "het_job_id": 0,
            "comment": job.comment,
        }
        if job.alloc:
            doc["job_resources"] = {"nodes": ",".join(job.alloc), "allocated_nodes": [
                {"nodename": node, "memory_allocated": cpus * job.mem_per_cpu,
                 "sockets": {"0": {"cores": {str(i): "allocated" for i in range(cpus)}}}}
                for node, cpus in job.alloc.items()]}
        return doc

    def pin(self, job_id: str, node_list: str, num_nodes: int | None,
            comment: str | None = None) -> None:
        self.actions.append(("pin", job_id))
        self.jobs[job_id].required = node_list
        if comment is not None:
            self.jobs[job_id].comment = comment

    def set_comment(self, job_id: str, comment: str) -> None:
        job = self.jobs[job_id]
        assert job.state in ("PENDING", "RUNNING"), f"job {job_id} {job.state}: not updatable"
        job.comment = comment

    def unpin(self, job_id: str) -> None:
        self.actions.append(("unpin", job_id))
        self.jobs[job_id].required = ""

    def release(self, job_id: str) -> None:
        self.actions.append(("release", job_id))
        self.jobs[job_id].reason = "None"

    def hold(self, job_id: str) -> None:
        self.actions.append(("hold", job_id))
        self.jobs[job_id].reason = "JobHeldAdmin"


# -- recording what the service answered ------------------------------------------------------


class CheckedSession:
    """The client's session, checking every decision against the snapshot it was asked on."""

    def __init__(self, session: DispatchSession, answers: list[str], slurm: SimSlurm) -> None:
        self.inner = session
        self.answers = answers  # one line per decision; problems make the test fail
        self.slurm = slurm

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def decide(self, request: pb.DispatchRequest, timeout: float | None = None) -> (
        pb.DispatchResponse
    ):
        response = self.inner.decide(request, timeout)
        _check(request, response, self.answers, self.slurm)
        return response

    def close(self, timeout: float | None = None) -> None:
        self.inner.close(timeout)


class CheckingClient:
    """The real client; every decision (session or Dispatch) is checked and recorded, and its
    layouts are handed to the simulated Slurm."""

    def __init__(self, client: DispatcherClient, slurm: SimSlurm) -> None:
        self.client = client
        self.slurm = slurm
        self.answers: list[str] = []

    def dispatch(self, request: pb.DispatchRequest, timeout: float | None = None) -> (
        pb.DispatchResponse
    ):
        response = self.client.dispatch(request, timeout)
        _check(request, response, self.answers, self.slurm)
        return response

    def session(self, timeout: float | None = None, stream: bool = True) -> CheckedSession:
        # The bridge asks for unary calls: assert it, so a change of mind is noticed.
        assert not stream, "the Slurm bridge keeps unary session calls"
        return CheckedSession(self.client.session(timeout, stream), self.answers, self.slurm)

    def report_completions(self, completions: Iterable[pb.JobCompletion], cluster: str = "",
                           timeout: float | None = None) -> int:
        return self.client.report_completions(completions, cluster, timeout)


def _check(request: pb.DispatchRequest, response: pb.DispatchResponse,
           answers: list[str], slurm: SimSlurm) -> None:
    snapshot = snapshot_from_pb(request)
    decision = decision_from_pb(response)
    problems = check_decision(snapshot, decision)
    assert not problems, problems
    for start in decision.starts:
        slurm.planned[start.job_id] = Counter(start.nodes)
    answers.append(f"t={request.time} " + " ".join(
        f"{s.job_id}@{','.join(s.nodes)}" for s in decision.starts))


# -- the scripted run -------------------------------------------------------------------------


@dataclass
class Run:
    cycles: list[tuple[int, bool, list[str], list[str], list[str]]]  # t, ok, decided, ...
    answers: list[str]
    outcome: dict[str, tuple[str, int, dict[str, int]]]  # job -> state, start, allocation
    actions: list[tuple[str, str]]
    metrics: BridgeMetrics
    violations: list[str]


WAVES: dict[int, list[dict[str, int]]] = {
    0: [{"tasks": 3, "duration": 60}, {"tasks": 2, "cpus_per_task": 2, "duration": 40},
        {"tasks": 6, "duration": 30}, {"tasks": 1, "duration": 20},
        {"tasks": 1, "mem_per_cpu": 1500, "duration": 30}],
    2: [{"tasks": 4, "duration": 30}, {"tasks": 1, "cpus_per_task": 3, "duration": 40},
        {"tasks": 8, "duration": 20}, {"tasks": 2, "duration": 50},
        {"tasks": 4, "tasks_per_node": 2, "duration": 20}],
    7: [{"tasks": 5, "duration": 20}, {"tasks": 1, "duration": 10},
        {"tasks": 3, "cpus_per_task": 2, "duration": 20}, {"tasks": 1, "duration": 30},
        {"tasks": 2, "mem_per_cpu": 900, "duration": 20}, {"tasks": 12, "duration": 10}],
}
CYCLES = 24
CANCEL_AT = 3  # the last job of wave 2 that is still held is cancelled before this cycle


def scripted_run(
    target: str, *, full_snapshots: bool = False,
    between: Callable[[int], None] = lambda k: None,
) -> Run:
    """The scripted run against the service at `target`; `between(k)` runs before cycle k."""
    slurm = SimSlurm()
    metrics = BridgeMetrics()
    with DispatcherClient(target, timeout=30.0, retries=5, max_backoff=1.0) as client:
        service = CheckingClient(client, slurm)
        # full_snapshots is only given when set: the sessions run uses the default.
        flag: dict[str, Any] = {"full_snapshots": True} if full_snapshots else {}
        config = BridgeConfig(frozenset({"batch"}), interval=STEP, start_timeout=60,
                              dispatcher=pb.DISPATCHER_EASY, predictor=pb.PREDICTOR_WALLTIME,
                              dispatch_timeout=30.0, **flag)
        bridge = Bridge(config, slurm, service, metrics, clock=lambda: slurm.now,
                        out=lambda s: None)
        cycles = []
        drained_at = None
        for k in range(CYCLES):
            now = T0 + k * STEP
            slurm.tick(now)
            between(k)
            for job in WAVES.get(k, []):
                slurm.submit(**job)
            if k == CANCEL_AT:
                held = [j for j in slurm.jobs.values() if j.reason == "JobHeldUser"]
                slurm.cancel(held[-1].id)
            if drained_at is not None and k == drained_at + 3:
                slurm.drained.clear()
            result = bridge.cycle() if k < CYCLES - 1 else None
            if result is None:  # the last cycle through run(), which closes the session
                assert bridge.run(once=True) == 0
                continue
            cycles.append((now, result.ok, result.decided, result.released, result.left_held))
            onto_n3 = [j for j in result.released if "n3" in slurm.jobs[j].required]
            if drained_at is None and k >= 2 and onto_n3:
                slurm.drained.add("n3")  # before Slurm starts it: the bridge holds it again
                drained_at = k
    outcome = {j.id: (j.state, j.start_time, dict(j.alloc)) for j in slurm.jobs.values()}
    return Run(cycles, service.answers, outcome, slurm.actions, metrics, slurm.violations)


@contextmanager
def serving(port: int = 0) -> Iterator[RunningServer]:
    config = dataclasses.replace(load_config(env={}), listen=f"127.0.0.1:{port}", workers=4)
    running = start_server(config)
    try:
        yield running
    finally:
        running.stop(grace=0.5)


def rpcs(server: RunningServer, service: str, method: str) -> int:
    assert server.metrics is not None
    value = server.metrics.registry.get_sample_value(
        "grpc_server_started_total",
        {"grpc_service": service, "grpc_method": method, "grpc_type": "unary"})
    return int(value or 0)


def sample(metrics: BridgeMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value("hpcdispatch_bridge_" + name, labels) or 0.0


def resyncs(metrics: BridgeMetrics) -> dict[str, float]:
    return {s.labels["reason"]: s.value for family in metrics.registry.collect()
            if family.name == "hpcdispatch_bridge_session_resyncs"
            for s in family.samples if s.name.endswith("_total")}


@pytest.fixture(scope="module")
def full_run() -> Iterator[tuple[Run, dict[str, int]]]:
    with serving() as server:
        run = scripted_run(server.target, full_snapshots=True)
        calls = {m: rpcs(server, SESSION, m) for m in ("OpenSession", "UpdateSession",
                                                        "CloseSession")}
        calls["Dispatch"] = rpcs(server, DISPATCH, "Dispatch")
    yield run, calls


def _assert_sane(run: Run) -> None:
    assert all(ok for _, ok, *_ in run.cycles), run.cycles
    assert run.violations == []
    states = Counter(state for state, _, _ in run.outcome.values())
    assert states == {"COMPLETED": len(run.outcome) - 1, "CANCELLED": 1}, run.outcome
    # The drained node made the bridge hold a released job again; it was decided again.
    assert sample(run.metrics, "reconciliations_total", kind="node_unavailable") >= 1
    reheld = [job for action, job in run.actions if action == "hold"]
    assert reheld and all(run.actions.count(("release", job)) == 2 for job in reheld)
    assert sample(run.metrics, "completions_reported_total") == len(run.outcome) - 1


# -- the tests --------------------------------------------------------------------------------


def test_full_snapshots_flag_sends_every_snapshot_with_dispatch(
    full_run: tuple[Run, dict[str, int]],
) -> None:
    run, calls = full_run
    _assert_sane(run)
    decisions = len(run.answers)
    assert decisions >= 8
    assert calls == {"OpenSession": 0, "UpdateSession": 0, "CloseSession": 0,
                     "Dispatch": decisions}
    assert sample(run.metrics, "decisions_total", via="full_snapshot") == decisions


def test_sessions_are_the_default_and_decide_as_full_snapshots(
    full_run: tuple[Run, dict[str, int]],
) -> None:
    reference, _ = full_run
    with serving() as server:
        with capture_logs() as logs:
            run = scripted_run(server.target)
        calls = {m: rpcs(server, SESSION, m) for m in ("OpenSession", "UpdateSession",
                                                        "CloseSession")}
        dispatches = rpcs(server, DISPATCH, "Dispatch")
        assert server.metrics is not None
        still_open = server.metrics.registry.get_sample_value("hpcdispatch_sessions_open")
    _assert_sane(run)
    decisions = len(run.answers)
    # One session for the whole run, a delta per later decision, closed at the end; no resync
    # (consecutive snapshots are always deltas of each other), no full snapshot.
    assert dispatches == 0
    assert calls == {"OpenSession": 1, "UpdateSession": decisions - 1, "CloseSession": 1}
    assert still_open == 0
    assert sample(run.metrics, "decisions_total", via="session_open") == 1
    assert sample(run.metrics, "decisions_total", via="session_delta") == decisions - 1
    assert resyncs(run.metrics) == {}
    events = [e["event"] for e in logs]
    assert events.count("session_opened") == 1 and events.count("session_closed") == 1
    assert "session_resynced" not in events
    # The same decisions, releases, re-holds and job outcomes as with whole snapshots.
    assert run.answers == reference.answers
    assert run.cycles == reference.cycles
    assert run.actions == reference.actions
    assert run.outcome == reference.outcome


def test_the_bridge_logs_a_session_by_its_short_tag_never_by_its_id() -> None:
    """The session id is the secret that owns the session (docs/configuration.md,
    max_sessions_per_identity): the bridge's lines name the session by the tag the server's
    own lines use, so the two logs can be read side by side."""
    with serving() as server, capture_logs() as logs:
        scripted_run(server.target)
    leaked = [e for e in logs if any(SESSION_ID.search(str(v)) for v in e.values())]
    assert leaked == []
    bridge = [e for e in logs if e["event"] in ("session_opened", "session_closed")]
    closed_by_server = [e for e in logs if e["event"] == "session closed"]
    assert len(bridge) == 2 and len(closed_by_server) == 1
    assert {e["session"] for e in bridge} == {closed_by_server[0]["session"]}
    assert re.fullmatch("[0-9a-f]{8}", closed_by_server[0]["session"])


def test_a_server_restart_between_cycles_is_survived_by_a_resync(
    full_run: tuple[Run, dict[str, int]],
) -> None:
    reference, _ = full_run
    servers: list[RunningServer] = []
    first = start_server(dataclasses.replace(load_config(env={}), listen="127.0.0.1:0"))
    servers.append(first)
    restart_at = 9

    def restart(k: int) -> None:
        if k == restart_at:
            servers[-1].stop(grace=0.5)
            servers.append(start_server(dataclasses.replace(
                load_config(env={}), listen=f"127.0.0.1:{first.port}")))

    try:
        with capture_logs() as logs:
            run = scripted_run(first.target, between=restart)
        calls = [{m: rpcs(s, SESSION, m) for m in ("OpenSession", "UpdateSession")}
                 for s in servers]
    finally:
        for server in servers[1:]:
            server.stop(grace=0.5)
    assert len(servers) == 2
    _assert_sane(run)
    # The first delta after the restart was refused (the new server does not know the session);
    # the client opened a new one with the whole snapshot, and the bridge counted it.
    assert calls[0]["OpenSession"] == 1 and calls[1]["OpenSession"] == 1
    assert calls[1]["UpdateSession"] >= 2  # the refused delta, then the later ones
    reasons = resyncs(run.metrics)
    assert sum(reasons.values()) == 1 and set(reasons) <= {"server_restarted",
                                                           "unknown_session"}, reasons
    resynced = [e for e in logs if e["event"] == "session_resynced"]
    assert len(resynced) == 1 and resynced[0]["log_level"] == "warning"
    assert sample(run.metrics, "decisions_total", via="session_open") == 2
    # Every decision was checked (CheckingClient), every released job fitted (no violations),
    # and the run ends as the uninterrupted one.
    assert run.answers == reference.answers
    assert run.cycles == reference.cycles
    assert run.outcome == reference.outcome


def test_an_unreachable_service_loses_the_session_and_the_next_cycle_reopens_it() -> None:
    slurm = SimSlurm()
    with serving() as server:
        port = server.port
        with DispatcherClient(server.target, timeout=120.0, retries=2) as client:
            metrics = BridgeMetrics()
            bridge = Bridge(BridgeConfig(frozenset({"batch"}), dispatch_timeout=120.0,
                                         dispatcher=pb.DISPATCHER_EASY), slurm, client,
                            metrics, clock=lambda: slurm.now, out=lambda s: None)
            slurm.submit(12, duration=100)  # the cluster is full until it ends
            for k in range(2):
                slurm.submit(1)
                slurm.tick(T0 + k * STEP)
                assert bridge.cycle().ok
            server.stop(grace=0.1)
            slurm.tick(T0 + 2 * STEP)
            failed = bridge.cycle()
            assert not failed.ok and failed.error_kind == "service_unavailable"
            with serving(port):
                client.wait_ready(120)  # the channel reconnects with its own backoff
                slurm.tick(T0 + 3 * STEP)
                assert bridge.cycle().ok
    assert resyncs(metrics) == {"session_lost": 1}
    assert sample(metrics, "decisions_total", via="session_open") == 2
    assert sample(metrics, "decisions_total", via="session_delta") == 1


@pytest.mark.parametrize("full_snapshots", [False, True], ids=["session", "full_snapshots"])
def test_a_released_job_that_no_longer_fits_after_slurm_laid_out_another_is_held_again(
    full_snapshots: bool,
) -> None:
    """Slurm starts the first job released in a cycle on the node decided for the second one:
    the second no longer fits its planned node. The bridge must not reserve it (the snapshot
    would over-commit that node and the service would refuse it whole, INVALID_ARGUMENT): it
    holds it again at once, and the service places it again in the same cycle."""
    slurm = SimSlurm()
    metrics = BridgeMetrics()
    flag: dict[str, Any] = {"full_snapshots": True} if full_snapshots else {}
    with (serving() as server,
          DispatcherClient(server.target, timeout=30.0, retries=5) as client,
          capture_logs() as logs):
        service = CheckingClient(client, slurm)
        bridge = Bridge(BridgeConfig(frozenset({"batch"}), interval=STEP, start_timeout=60,
                                     dispatcher=pb.DISPATCHER_EASY,
                                     predictor=pb.PREDICTOR_WALLTIME, **flag),
                        slurm, service, metrics, clock=lambda: slurm.now,
                        out=lambda s: None)
        first, second = slurm.submit(4, duration=40), slurm.submit(4, duration=30)
        small = slurm.submit(1, duration=20)
        results = []
        late = ""
        for k in range(8):
            slurm.tick(T0 + k * STEP)
            if k == 1:  # a held job: the next cycle asks the service (sends its snapshot)
                late = slurm.submit(2, duration=10)
            results.append(bridge.cycle())
            if k == 0:
                # The premise: three releases, the first two on distinct single nodes.
                assert results[0].released == [first, second, small], results[0]
                plan_first, plan_second = slurm.planned[first], slurm.planned[second]
                assert len(plan_first) == len(plan_second) == 1
                assert not set(plan_first) & set(plan_second)
                slurm.layouts[first] = Counter(plan_second)  # Slurm's own choice
        assert server.metrics is not None
        invalid = sum(
            server.metrics.registry.get_sample_value(
                "grpc_server_handled_total",
                {"grpc_service": svc, "grpc_method": method, "grpc_type": "unary",
                 "grpc_code": code_label(grpc.StatusCode.INVALID_ARGUMENT)}) or 0
            for svc, method in ((DISPATCH, "Dispatch"), (SESSION, "OpenSession"),
                                (SESSION, "UpdateSession")))
    # Every snapshot was valid and answered (each decision was checked by CheckingClient).
    assert [r.error_kind for r in results if not r.ok] == []
    assert invalid == 0
    assert slurm.violations == []
    (line,) = [a for a in service.answers if a.startswith(f"t={T0 + STEP} ")]
    # Slurm started the first job where the second was planned; the second did not start.
    assert slurm.jobs[first].alloc == {n: 4 for n in plan_second}
    assert first in slurm.off_plan
    # The second job was held again in the next cycle, with its own reason, and decided again
    # in the same cycle on another node; it then started there and completed.
    reheld = [e for e in logs if e["event"] == "reconcile_no_longer_fits"]
    assert [(e["job_id"], e["nodes"], e["log_level"]) for e in reheld] == [
        (second, sorted(plan_second), "warning")]
    assert sample(metrics, "reconciliations_total", kind="no_longer_fits") == 1
    assert [a for a in slurm.actions if a[1] == second] == [
        ("pin", second), ("release", second), ("hold", second), ("unpin", second),
        ("pin", second), ("release", second)]
    assert set(results[1].released) == {second, late} and f"{second}@" in line
    assert set(slurm.planned[second]).isdisjoint(plan_second)
    assert slurm.jobs[second].alloc == dict(slurm.planned[second])  # 1 CPU a unit
    assert {j.id: j.state for j in slurm.jobs.values()} == {
        first: "COMPLETED", second: "COMPLETED", small: "COMPLETED", late: "COMPLETED"}
    assert sample(metrics, "decisions_total",
                  via="full_snapshot" if full_snapshots else "session_delta") >= 1
    assert resyncs(metrics) == {}


class _DispatchOnly(pb_grpc.DispatcherServiceServicer):
    """A service without SessionService (an older server): Dispatch forwarded to a real one."""

    def __init__(self, client: DispatcherClient) -> None:
        self.client = client
        self.calls = 0

    def Dispatch(self, request: pb.DispatchRequest, context: grpc.ServicerContext) -> (
        pb.DispatchResponse
    ):
        self.calls += 1
        return self.client.dispatch(request)


def test_a_service_without_sessions_gets_full_snapshots() -> None:
    with serving() as real, DispatcherClient(real.target) as upstream:
        old = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        servicer = _DispatchOnly(upstream)
        pb_grpc.add_DispatcherServiceServicer_to_server(servicer, old)
        port = old.add_insecure_port("127.0.0.1:0")
        old.start()
        try:
            with DispatcherClient(f"127.0.0.1:{port}") as client, capture_logs() as logs:
                slurm = SimSlurm()
                metrics = BridgeMetrics()
                bridge = Bridge(BridgeConfig(frozenset({"batch"}),
                                             dispatcher=pb.DISPATCHER_EASY), slurm, client,
                                metrics, clock=lambda: slurm.now, out=lambda s: None)
                for k in range(3):
                    slurm.submit(4, duration=15)
                    slurm.tick(T0 + k * STEP)
                    assert bridge.cycle().ok
        finally:
            old.stop(0)
    assert servicer.calls == 3
    assert sample(metrics, "decisions_total", via="full_snapshot") == 3
    assert sum(sample(metrics, "decisions_total", via=v)
               for v in ("session_open", "session_delta")) == 0
    events = [e["event"] for e in logs]
    assert events.count("sessions_unimplemented_full_snapshots") == 1
    assert [a for a in slurm.actions if a[0] == "release"] == [
        ("release", "101"), ("release", "102"), ("release", "103")]


def test_keep_order_puts_unchanged_jobs_first_and_new_or_changed_ones_last() -> None:
    def queued(job_id: str, units: int = 1) -> QueuedJob:
        return QueuedJob(job_id, "u", "j", "batch", T0, units, {"core": 1}, 60)

    up = {"core": 4}
    old = Snapshot(T0, (Node("a", NodeState.UP, up), Node("b", NodeState.UP, up)), (),
                   (queued("1"), queued("2"), queued("3")))
    new = Snapshot(T0 + 1, (Node("c", NodeState.UP, up), Node("b", NodeState.DOWN, up),
                            Node("a", NodeState.UP, up)), (),
                   (queued("4"), queued("3"), queued("2", units=2), queued("1")))
    ordered = keep_order(old, new)
    assert [n.id for n in ordered.nodes] == ["a", "b", "c"]
    assert ordered.nodes[1].state is NodeState.DOWN
    assert [(q.id, q.units) for q in ordered.queued] == [("1", 1), ("3", 1), ("4", 1),
                                                         ("2", 2)]
    assert keep_order(None, new) is new


def test_the_flag_and_the_config_key_select_full_snapshots() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    bridge_cli.register(sub)
    base = ["slurm-bridge", "--partition", "batch"]
    default = bridge_cli.config_from_args(parser.parse_args(base))
    full = bridge_cli.config_from_args(parser.parse_args([*base, "--full-snapshots"]))
    structlog.reset_defaults()
    assert not default.full_snapshots and full.full_snapshots
    with DispatcherClient("127.0.0.1:1") as client:
        slurm = SimSlurm()
        by_default = Bridge(default, slurm, client)
        assert isinstance(by_default.session, DispatchSession)
        assert by_default.session.stream is None  # unary calls: docs/slurm-bridge.md
        assert Bridge(full, slurm, client).session is None
    # The client's session is what the bridge's protocol asks for (checked by mypy).
    typed: Callable[[DispatcherClient], DecisionSession] = DispatcherClient.session
    assert typed is not None
