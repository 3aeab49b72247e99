"""A site's rules read from real Slurm 22.05 daemons, end to end (issue #50, item 3).

One cluster for the module (tests/slurm_cluster.py): 4 emulated nodes × 2 CPUs; partitions
`left` = n1, n2 and `right` = n3, n4 (beside `batch`, every node); n1 Features=fast, n3
Features=fast,big. Jobs are submitted held (`sbatch -H`); the bridge manages `left` and `right`
and asks a real service on loopback (EASY). Checked:

* jobs of the two partitions never cross, and a constrained job lands only on featured nodes
  (every decision, and where Slurm really ran each job); a job whose constraint the snapshot
  cannot express (the matching OR `[fast|big]`) is released unpinned and Slurm runs it on a
  node it allows;
* jobs of `--constraint=fast|big` over both partitions run only on n1 (fast) and n3 (fast,
  big), where the service placed them, while jobs without it take n2 and n4;
* a job of `--reservation=R` (R on n2, listing root, not MAGNETIC) runs only on n2, though n1
  is free and it was submitted first, while a job without it runs on n1; a job of a
  reservation starting in a minute is held until it begins, then runs on its node;
* a job whose time limit runs into a MAINT reservation starting soon is not started while a
  short one is; once the reservation is deleted, it is;
* a job given a lower nice (`scontrol update job=J nice=-100`, as root) starts first;
* the promise book (pcp20, profile book) promises a job past the maintenance, on its own
  partition's nodes;
* a drained node inside a MAINT reservation is sent up with its window (a node back at a
  time): the book promises a job needing it at the reservation's end; drained with no
  reservation, no promise.

Skipped, with the reason, when Slurm cannot be installed (failed with REQUIRE_SLURM_TESTS=1).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from hpcdispatch.client import DispatcherClient
from hpcdispatch.server.rpc.app import RunningServer
from hpcdispatch.slurm_bridge.bridge import Bridge, BridgeConfig
from hpcdispatch.slurm_bridge.metrics import BridgeMetrics
from hpcdispatch.slurm_bridge.slurm_cli import SlurmCommands
from hpcdispatch.slurm_bridge.slurm_reservations import parse_reservations
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.slurm_bridge.test_slurm_bridge_integration import RecordingClient
from tests.slurm_cluster import SlurmCluster, ensure_slurm, started

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

PARTITION_NODES = {"left": {"n1", "n2"}, "right": {"n3", "n4"}}
FEATURES = {"n1": "fast", "n3": "fast,big"}
MANAGED = frozenset(PARTITION_NODES)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    reason = ensure_slurm()
    if reason is not None:
        if os.environ.get("REQUIRE_SLURM_TESTS"):
            pytest.fail(f"Slurm required but unavailable: {reason}")
        pytest.skip(f"Slurm integration test skipped: {reason}")
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm-rules"), nodes=4, cpus=2,
                           memory_mib=1000, features=FEATURES,
                           extra_partitions={"left": "n[1-2]", "right": "n[3-4]"})
    with started(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    from hpcdispatch.server.rpc.app import ServerConfig, start_server

    running = start_server(ServerConfig(listen="127.0.0.1:0", default_dispatcher="easy"))
    try:
        yield running
    finally:
        running.stop(1.0)



def _held(cluster: SlurmCluster, *options: str, secs: int = 2) -> str:
    return cluster.sbatch("-H", *options, script=f"sleep {secs}")



def _bridge(cluster: SlurmCluster, service: Any, metrics: BridgeMetrics | None = None,
            **config: Any) -> Bridge:
    cfg = BridgeConfig(MANAGED, **{"interval": 0.5, "dispatch_timeout": 120.0,
                                   "start_timeout": 120.0, "dispatcher": pb.DISPATCHER_EASY,
                                   **config})
    return Bridge(cfg, SlurmCommands(env=cluster.env, timeout=20), service,
                  metrics or BridgeMetrics())


def _cancel(cluster: SlurmCluster, job_ids: list[str]) -> None:
    if job_ids:
        cluster.run("scancel", *job_ids, check=False)
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:  # the next test starts on idle nodes
        active = [j for j in cluster.jobs().values() if j.state in ("RUNNING", "COMPLETING")]
        if not active:
            return
        time.sleep(0.3)


def test_partitions_and_constraints_hold_on_real_slurm(
    cluster: SlurmCluster, server: RunningServer,
) -> None:
    # Right's jobs first: without partitions and features, EASY would put them on n1, n2.
    spec = {
        "r_big": ("-p", "right", "-n", "2", "-C", "big"),
        "r_any1": ("-p", "right", "-n", "1"),
        "r_any2": ("-p", "right", "-n", "1"),
        "r_fast_big": ("-p", "right", "-n", "1", "-C", "fast&big"),
        "l_two": ("-p", "left", "-n", "2"),
        "l_fast": ("-p", "left", "-n", "1", "-C", "fast"),
        "l_any": ("-p", "left", "-n", "1"),
        "r_or": ("-p", "right", "-n", "1", "-C", "[fast|big]"),  # left to Slurm
    }
    ids = {name: _held(cluster, "-t", "2", *options) for name, options in spec.items()}
    cluster.wait_held(list(ids.values()))
    metrics = BridgeMetrics()
    recorder, logs = _run_bridge_until_done(cluster, server, list(ids.values()), metrics)
    final = cluster.jobs()
    assert {n: final[i].state for n, i in ids.items()} == dict.fromkeys(ids, "COMPLETED")
    ran_on = {name: {a.node for a in final[i].allocations} for name, i in ids.items()}
    for name, options in spec.items():
        partition = options[1]
        assert ran_on[name] <= PARTITION_NODES[partition], (name, ran_on[name])
        if name != "r_or":  # every other job ran where the service chose, in its partition
            assert recorder.chosen[ids[name]] == ran_on[name], name
    assert ran_on["r_big"] == ran_on["r_fast_big"] == {"n3"}
    assert ran_on["l_fast"] == {"n1"}
    # The matching OR: never decided by the service, released unpinned, run by Slurm on a
    # node of `right` having fast or big.
    assert ids["r_or"] not in recorder.chosen
    assert [e["job_id"] for e in logs if e["event"] == "job_left_to_slurm"] == [ids["r_or"]]
    assert ran_on["r_or"] == {"n3"}
    assert metrics.registry.get_sample_value(
        "hpcdispatch_bridge_jobs_left_to_slurm_total") == 1
    assert not [e for e in logs if e["event"] in (
        "decision_rejected", "pin_failed_job_stays_held", "reconcile_not_started")], logs


def _maintenance(cluster: SlurmCluster, name: str, in_minutes: int, minutes: int) -> None:
    cluster.run("scontrol", "create", "reservation", f"ReservationName={name}",
                f"StartTime=now+{in_minutes}minutes", f"Duration={minutes}", "Nodes=n[3-4]",
                "Flags=MAINT", "Users=root")


def test_no_job_is_started_into_a_maintenance_reservation(
    cluster: SlurmCluster, server: RunningServer,
) -> None:
    _maintenance(cluster, "maint_soon", 5, 10)
    # Submitted first, so that without windows EASY would start it first.
    long = _held(cluster, "-p", "right", "-n", "1", "-t", "10", secs=1)  # into the window
    short = _held(cluster, "-p", "right", "-n", "1", "-t", "2", secs=1)  # ends before it
    cluster.wait_held([long, short])
    client = DispatcherClient(server.target, timeout=120.0)
    bridge = _bridge(cluster, client)
    try:
        first = bridge.cycle()
        assert first.ok and first.released == [short], first
        second = bridge.cycle()
        assert second.ok and long not in second.released, second
        assert cluster.jobs()[long].held
        # The reservation, not something else, kept it: gone, the long job starts.
        cluster.run("scontrol", "delete", "reservation=maint_soon")
        third = bridge.cycle()
        assert third.ok and third.released == [long], third
        deadline = time.monotonic() + 60.0
        while not all(cluster.jobs()[j].state == "COMPLETED" for j in (long, short)):
            assert time.monotonic() < deadline, cluster.jobs()
            time.sleep(0.5)
    finally:
        bridge.close_session()
        client.close()
        cluster.run("scontrol", "delete", "reservation=maint_soon", check=False)
        _cancel(cluster, [long, short])


def test_nice_reorders_what_starts(cluster: SlurmCluster, server: RunningServer) -> None:
    whole = ("-p", "left", "-n", "4", "-t", "1")  # all of `left`: one job at a time
    first, second, third = (_held(cluster, *whole, secs=1) for _ in range(3))
    cluster.run("scontrol", "update", f"jobid={third}", "nice=-100")  # as root
    cluster.wait_held([first, second, third])
    assert cluster.jobs()[third].nice == -100
    client = DispatcherClient(server.target, timeout=120.0)
    bridge = _bridge(cluster, client)
    try:
        result = bridge.cycle()
        assert result.ok and result.released == [third], result
    finally:
        bridge.close_session()
        client.close()
        _cancel(cluster, [first, second, third])


def test_a_promise_moves_past_a_maintenance_reservation(
    cluster: SlurmCluster, server: RunningServer,
) -> None:
    _maintenance(cluster, "maint_promise", 5, 10)
    end = next(r.end for r in parse_reservations(SlurmCommands(env=cluster.env).reservations())
               if r.name == "maint_promise")
    long = _held(cluster, "-p", "right", "-n", "4", "-t", "10", secs=1)
    cluster.wait_held([long])
    client = DispatcherClient(server.target, timeout=120.0)
    bridge = _bridge(cluster, client, dispatcher=pb.DISPATCHER_PCP20, profile="book",
                     promise_after_s=0, predictor=pb.PREDICTOR_WALLTIME,
                     promise_comments=False)
    try:
        result = bridge.cycle()
        assert result.ok and long not in result.released, result
        assert result.promised.get(long, 0) >= end, (result.promised, end)
    finally:
        bridge.close_session()
        client.close()
        cluster.run("scontrol", "delete", "reservation=maint_promise", check=False)
        _cancel(cluster, [long])


def _run_bridge_until_done(cluster: SlurmCluster, server: RunningServer, ids: list[str],
                           metrics: BridgeMetrics | None = None, within: float = 240.0,
                           ) -> tuple[RecordingClient, list[Any]]:
    """The bridge's loop until every job of `ids` completed; the recorder and the logs."""
    client = DispatcherClient(server.target, timeout=120.0)
    recorder = RecordingClient(client)
    bridge = _bridge(cluster, recorder, metrics)
    thread = threading.Thread(target=bridge.run, daemon=True)
    try:
        with capture_logs() as logs:
            thread.start()
            deadline = time.monotonic() + within
            while time.monotonic() < deadline:
                jobs = cluster.jobs()
                if all(jobs[i].state == "COMPLETED" for i in ids):
                    break
                assert thread.is_alive(), "bridge loop ended on its own"
                time.sleep(0.5)
    finally:
        bridge.request_stop()
        thread.join(15)
        client.close()
        _cancel(cluster, ids)
    return recorder, logs


def test_an_or_constraint_lands_only_on_nodes_with_one_of_its_features(
    cluster: SlurmCluster, server: RunningServer,
) -> None:
    """Three whole-node jobs of --constraint=fast|big over left and right, submitted first
    (EASY's first fit would put them on n1, n2 without the OR), and two whole-node jobs
    without a constraint."""
    both = ("-p", "left,right", "-n", "2", "-t", "1")
    spec = {f"or{k}": (*both, "-C", "fast|big") for k in range(3)}
    spec.update({f"any{k}": both for k in range(2)})
    ids = {name: _held(cluster, *options) for name, options in spec.items()}
    cluster.wait_held(list(ids.values()))
    recorder, logs = _run_bridge_until_done(cluster, server, list(ids.values()))
    final = cluster.jobs()
    assert {n: final[i].state for n, i in ids.items()} == dict.fromkeys(ids, "COMPLETED")
    ran_on = {name: {a.node for a in final[i].allocations} for name, i in ids.items()}
    for name, job_id in ids.items():  # each where the service chose it
        assert recorder.chosen[job_id] == ran_on[name], name
    for k in range(3):
        assert ran_on[f"or{k}"] <= {"n1", "n3"}, ran_on
    assert not [e for e in logs if e["event"] in (
        "job_left_to_slurm", "decision_rejected", "pin_failed_job_stays_held",
        "reconcile_not_started")], logs


def _reservation(cluster: SlurmCluster, name: str, start: str, minutes: int, nodes: str
                 ) -> None:
    cluster.run("scontrol", "create", "reservation", f"ReservationName={name}",
                f"StartTime={start}", f"Duration={minutes}", f"Nodes={nodes}", "Users=root")


def test_a_reservation_job_runs_only_on_its_reservations_nodes(
    cluster: SlurmCluster, server: RunningServer,
) -> None:
    """R on n2 from now, listing root (who submits every job), not MAGNETIC. The job of
    --reservation=R is submitted first: EASY's first fit would put it on n1."""
    _reservation(cluster, "resv_now", "now", 10, "n2")
    try:
        in_r = _held(cluster, "-p", "left", "-n", "2", "-t", "2", "--reservation=resv_now")
        plain = _held(cluster, "-p", "left", "-n", "2", "-t", "2")
        cluster.wait_held([in_r, plain])
        recorder, logs = _run_bridge_until_done(cluster, server, [in_r, plain])
        final = cluster.jobs()
        assert (final[in_r].state, final[plain].state) == ("COMPLETED", "COMPLETED")
        assert {a.node for a in final[in_r].allocations} == recorder.chosen[in_r] == {"n2"}
        assert {a.node for a in final[plain].allocations} == recorder.chosen[plain] == {"n1"}
        assert not [e for e in logs if e["event"] == "job_left_to_slurm"], logs
    finally:
        cluster.run("scontrol", "delete", "reservation=resv_now", check=False)


def test_a_reservation_job_waits_for_its_reservation_to_begin(
    cluster: SlurmCluster, server: RunningServer,
) -> None:
    """R on n4 from a minute from now: its job (2 minutes, fitting R) is not started before R
    begins, though every node of `right` is idle, and starts on n4 once it has."""
    _reservation(cluster, "resv_soon", "now+1minutes", 10, "n4")
    client = DispatcherClient(server.target, timeout=120.0)
    seen: list[float] = []  # the bridge's clock readings: each snapshot's time

    def clock() -> float:
        seen.append(time.time())
        return seen[-1]

    bridge = Bridge(BridgeConfig(MANAGED, interval=0.5, dispatch_timeout=120.0,
                                 start_timeout=120.0, dispatcher=pb.DISPATCHER_EASY),
                    SlurmCommands(env=cluster.env, timeout=20), client, BridgeMetrics(),
                    clock=clock)
    in_r = ""
    try:
        start = next(r.start for r in parse_reservations(
            SlurmCommands(env=cluster.env).reservations()) if r.name == "resv_soon")
        in_r = _held(cluster, "-p", "right", "-n", "1", "-t", "2", "--reservation=resv_soon")
        cluster.wait_held([in_r])
        first = bridge.cycle()
        assert first.ok, first
        if max(seen) < start:  # decided before R began (else the machine was too slow to see)
            assert first.released == [], first
            assert cluster.jobs()[in_r].held
        while time.time() < start + 1:  # R's own start, on Slurm's clock (this machine's)
            assert time.time() < start + 120, "reservation never began"
            time.sleep(1.0)
        if in_r not in first.released:
            second = bridge.cycle()
            assert second.ok and second.released == [in_r], second
        deadline = time.monotonic() + 60.0
        while cluster.jobs()[in_r].state != "COMPLETED":
            assert time.monotonic() < deadline, cluster.jobs()[in_r]
            time.sleep(0.5)
        assert {a.node for a in cluster.jobs()[in_r].allocations} == {"n4"}
    finally:
        bridge.close_session()
        client.close()
        cluster.run("scontrol", "delete", "reservation=resv_soon", check=False)
        _cancel(cluster, [in_r] if in_r else [])


def test_a_drained_node_in_a_maintenance_is_promised_back_at_its_end(
    cluster: SlurmCluster, server: RunningServer,
) -> None:
    """n4 drained, inside a MAINT reservation of 10 minutes from now: the bridge sends it up
    with the window (the contract's node back at a time), so the book promises a job needing
    all of `right` (n3 and n4) at the maintenance's end or later, and nothing starts now. With
    the reservation deleted, n4 is only drained, with no return time: no promise."""
    cluster.run("scontrol", "update", "nodename=n4", "state=drain", "reason=back-at-test")
    cluster.run("scontrol", "create", "reservation", "ReservationName=maint_back",
                "StartTime=now", "Duration=10", "Nodes=n4", "Flags=MAINT,IGNORE_JOBS",
                "Users=root")
    client = DispatcherClient(server.target, timeout=120.0)
    bridge = _bridge(cluster, client, dispatcher=pb.DISPATCHER_PCP20, profile="book",
                     promise_after_s=0, predictor=pb.PREDICTOR_WALLTIME,
                     promise_comments=False)
    whole = ""
    try:
        end = next(r.end for r in parse_reservations(
            SlurmCommands(env=cluster.env).reservations()) if r.name == "maint_back")
        whole = _held(cluster, "-p", "right", "-n", "4", "-t", "5", secs=1)
        cluster.wait_held([whole])
        back = bridge.cycle()
        assert back.ok and whole not in back.released, back
        assert back.promised.get(whole, 0) >= end, (back.promised, end)
        cluster.run("scontrol", "delete", "reservation=maint_back")
        drained = bridge.cycle()
        assert drained.ok and whole not in drained.released, drained
        assert whole not in drained.promised, drained.promised
    finally:
        bridge.close_session()
        client.close()
        cluster.run("scontrol", "delete", "reservation=maint_back", check=False)
        cluster.run("scontrol", "update", "nodename=n4", "state=resume", check=False)
        _cancel(cluster, [whole] if whole else [])
