"""Session decisions next to full-snapshot Dispatch, side by side in one run (`scale --sessions`).

For each size: the same synthetic instance (about `running share` of the nodes running one job,
a queue of `queued` jobs) goes to a real service on loopback, once whole with Dispatch (after
one warm-up request that builds the node table) and once through a session: opened with the
full snapshot, then `repeats` deltas of one second each (one running job ends, one job is
submitted), each asking for a decision. Times are measured at the client (round trip). Server
memory per session: the service's resident set size (same process) after opening the session
minus before (the request's own bytes excluded: it exists before). With a baseline (`scale
--sessions --baseline-commit REV`), the same request also goes to the server of commit REV
(benchmarks/scale/baseline_server.py, its own process), warm-up and `repeats` calls alike.
"""

from __future__ import annotations

import gc
import math
import os
import statistics
import time
from contextlib import ExitStack
from dataclasses import dataclass

from hpcdispatch.catalog import DISPATCHER_NAMES
from hpcdispatch.client import DispatcherClient
from hpcdispatch.proto_convert import snapshot_to_pb
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import homogeneous
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc

# synthetic_snapshot fills nodes with one job of 1/4 .. 1/1 of a node each (5/8 on average)
# until `busy` of the cores are used: 0.4375 runs one job on about 70 % of the nodes.
BUSY_FOR_70_PERCENT_OF_NODES = 0.4375


@dataclass(frozen=True, slots=True)
class SessionRow:
    nodes: int
    running: int
    queued: int
    dispatcher: str
    full_p50_ms: float
    session_p50_ms: float
    session_mb: float
    started_equal: bool
    baseline_p50_ms: float | None = None  # Dispatch of the --baseline-commit server
    # The session decisions' tail: p99 and the slowest (a garbage collection shows here).
    session_p99_ms: float | None = None
    session_max_ms: float | None = None

    def markdown(self) -> str:
        ratio = self.full_p50_ms / self.session_p50_ms if self.session_p50_ms else float("nan")
        p99, most = self.session_p99_ms, self.session_max_ms
        tail = ("– | – | –" if p99 is None or most is None
                else f"{p99:,.0f} | {most:,.0f} | {most / p99:.1f}×")
        row = (f"| {self.nodes:,} | {self.running:,} | {self.queued:,} | {self.dispatcher} "
               f"| {self.full_p50_ms:,.0f} | {self.session_p50_ms:,.0f} | {tail} | {ratio:.1f}× "
               f"| {self.session_mb:,.0f} | {'yes' if self.started_equal else 'no'} |")
        if self.baseline_p50_ms is None:
            return row
        old = self.baseline_p50_ms
        return (f"{row} {old:,.0f} | {old / self.full_p50_ms:.1f}× "
                f"| {old / self.session_p50_ms if self.session_p50_ms else float('nan'):.1f}× |")


HEADER = ("| nodes | running | queued | dispatcher | Dispatch p50 ms | session p50 ms | "
          "session p99 ms | session max ms | max ÷ p99 | ratio | "
          "server MB / session | same first decision |\n" + "|---" * 12 + "|")


def header(baseline: str | None = None) -> str:
    """The table's head; with a `baseline` commit, three more columns: that commit's Dispatch
    p50 and how many times faster today's Dispatch and session decisions are."""
    if baseline is None:
        return HEADER
    head, rule = HEADER.split("\n")
    return (f"{head} Dispatch p50 ms at {baseline} | {baseline} / Dispatch | "
            f"{baseline} / session |\n{rule}---|---|---|")


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure(
    client: DispatcherClient, nodes: int, queued: int, dispatcher: str, repeats: int,
    timeout: float, baseline: DispatcherClient | None = None,
    dispatch_repeats: int | None = None,
) -> SessionRow:
    """One row: `dispatch_repeats` Dispatch calls (default `repeats`) and `repeats` session
    decisions."""
    system = homogeneous(f"h{nodes}", nodes, {"core": 32, "mem": 131072})
    snapshot = synthetic_snapshot(system, queued, BUSY_FOR_70_PERCENT_OF_NODES, seed=0)
    request = snapshot_to_pb(snapshot)
    request.dispatcher = pb.Dispatcher.ValueType(DISPATCHER_NAMES[dispatcher])
    request.predictor = pb.PREDICTOR_WALLTIME
    full_walls = []
    # Warm-up: builds the node table and checks the running jobs once (server/intake/node_table.py,
    # server/intake/running_job_cache.py), as a workload manager's previous snapshot would have.
    first_full = client.dispatch(request, timeout=timeout)
    for _ in range(repeats if dispatch_repeats is None else dispatch_repeats):
        began = time.perf_counter()
        client.dispatch(request, timeout=timeout)
        full_walls.append((time.perf_counter() - began) * 1000)

    stub = pb_grpc.SessionServiceStub(client._channel)
    gc.collect()
    before = rss_mb()
    opened = stub.OpenSession(pb.OpenSessionRequest(snapshot=request, decide=True),
                              timeout=timeout)
    gc.collect()
    session_mb = rss_mb() - before
    same = [s.job_id for s in opened.decision.starts] == [s.job_id for s in first_full.starts]
    session_walls = []
    running = list(request.running_jobs)
    for step in range(1, repeats + 1):
        delta = pb.UpdateSessionRequest(
            session_id=opened.session_id, sequence=step, time=request.time + step,
            dispatcher=request.dispatcher, predictor=request.predictor, decide=True,
            ended_job_ids=[running[step - 1].id],
            submitted=[pb.QueuedJob(id=f"new{step}", user="u1", submit_time=request.time + step,
                                    units=1, unit_request={"core": 8}, requested_time=3600)],
        )
        began = time.perf_counter()
        stub.UpdateSession(delta, timeout=timeout)
        session_walls.append((time.perf_counter() - began) * 1000)
    stub.CloseSession(pb.CloseSessionRequest(session_id=opened.session_id), timeout=timeout)
    old = None if baseline is None else dispatch_p50(baseline, request, repeats, timeout)
    return SessionRow(nodes, len(request.running_jobs), queued, dispatcher,
                      statistics.median(full_walls), statistics.median(session_walls),
                      session_mb, same, old, percentile(session_walls, 0.99),
                      max(session_walls))


def percentile(values: list[float], share: float) -> float:
    """The value below which `share` of `values` lie (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(share * len(ordered)))) - 1]


def dispatch_p50(
    client: DispatcherClient, request: pb.DispatchRequest, repeats: int, timeout: float
) -> float:
    """Median round trip (ms) of `repeats` Dispatch calls, after one warm-up call."""
    client.dispatch(request, timeout=timeout)
    walls = []
    for _ in range(repeats):
        began = time.perf_counter()
        client.dispatch(request, timeout=timeout)
        walls.append((time.perf_counter() - began) * 1000)
    return statistics.median(walls)


def run(target: str, cases: list[tuple[int, int]], dispatchers: list[str], repeats: int,
        timeout: float, baseline: tuple[str, str] | None = None,
        dispatch_repeats: int | None = None) -> list[SessionRow]:
    """Print and return one row per (nodes, queued) case and dispatcher; with `baseline`
    (commit, target of its server: benchmarks/scale/baseline_server.py), that server's Dispatch
    of the same request too."""
    print(header(None if baseline is None else baseline[0]), flush=True)
    rows = []
    with ExitStack() as stack:
        client = stack.enter_context(DispatcherClient(target, timeout=timeout))
        old = None if baseline is None else stack.enter_context(
            DispatcherClient(baseline[1], timeout=timeout))
        for nodes, queued in cases:
            for dispatcher in dispatchers:
                row = measure(client, nodes, queued, dispatcher, repeats, timeout, old,
                              dispatch_repeats)
                print(row.markdown(), flush=True)
                rows.append(row)
    return rows
