"""A site's rules read from real Slurm 22.05 daemons, end to end (issue #50, item 3).

One cluster for the module (tests/slurm_cluster.py): 4 emulated nodes × 2 CPUs; partitions
`left` = n1, n2 and `right` = n3, n4 (beside `batch`, every node); n1 Features=fast, n3
Features=fast,big. Jobs are submitted held (`sbatch -H`); the bridge manages `left` and `right`
and asks a real service on loopback (EASY). Checked:

* jobs of the two partitions never cross, and a constrained job lands only on featured nodes
  (every decision, and where Slurm really ran each job); a job whose constraint the snapshot
  cannot express (`fast|big`) is released unpinned and Slurm runs it on a node it allows;
* a job whose time limit runs into a MAINT reservation starting soon is not started while a
  short one is; once the reservation is deleted, it is;
* a job given a lower nice (`scontrol update job=J nice=-100`, as root) starts first;
* the promise book (pcp20, profile book) promises a job past the maintenance, on its own
  partition's nodes.

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
        "r_or": ("-p", "right", "-n", "1", "-C", "fast|big"),  # left to Slurm
    }
    ids = {name: _held(cluster, "-t", "2", *options) for name, options in spec.items()}
    cluster.wait_held(list(ids.values()))
    client = DispatcherClient(server.target, timeout=120.0)
    recorder = RecordingClient(client)
    metrics = BridgeMetrics()
    bridge = _bridge(cluster, recorder, metrics)
    thread = threading.Thread(target=bridge.run, daemon=True)
    try:
        with capture_logs() as logs:
            thread.start()
            deadline = time.monotonic() + 240.0
            while time.monotonic() < deadline:
                jobs = cluster.jobs()
                if all(jobs[i].state == "COMPLETED" for i in ids.values()):
                    break
                assert thread.is_alive(), "bridge loop ended on its own"
                time.sleep(0.5)
    finally:
        bridge.request_stop()
        thread.join(15)
        client.close()
        _cancel(cluster, list(ids.values()))
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
    # The OR constraint: never decided by the service, released unpinned, run by Slurm on a
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
