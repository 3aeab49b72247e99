"""Session decisions next to full-snapshot Dispatch, side by side in one run (`scale --sessions`).

For each size: the same synthetic instance (about `running share` of the nodes running one job,
a queue of `queued` jobs) goes to a real service on loopback, once whole with Dispatch (after
one warm-up request that builds the node table) and once through a session: opened with the
full snapshot, then `repeats` deltas of one second each (one running job ends, one job is
submitted), each asking for a decision. Times are measured at the client (round trip). Server
memory per session: the service's resident set size (same process) after opening the session
minus before (the request's own bytes excluded: it exists before).
"""

from __future__ import annotations

import gc
import os
import statistics
import time
from dataclasses import dataclass

from hpcdispatch.client import DispatcherClient
from hpcdispatch.proto_convert import snapshot_to_pb
from hpcdispatch.server.catalog import DISPATCHER_NAMES
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

    def markdown(self) -> str:
        ratio = self.full_p50_ms / self.session_p50_ms if self.session_p50_ms else float("nan")
        return (f"| {self.nodes:,} | {self.running:,} | {self.queued:,} | {self.dispatcher} "
                f"| {self.full_p50_ms:,.0f} | {self.session_p50_ms:,.0f} | {ratio:.1f}× "
                f"| {self.session_mb:,.0f} | {'yes' if self.started_equal else 'no'} |")


HEADER = ("| nodes | running | queued | dispatcher | Dispatch p50 ms | session p50 ms | ratio | "
          "server MB / session | same first decision |\n|---|---|---|---|---|---|---|---|---|")


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        pages = int(statm.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def measure(
    client: DispatcherClient, nodes: int, queued: int, dispatcher: str, repeats: int,
    timeout: float,
) -> SessionRow:
    system = homogeneous(f"h{nodes}", nodes, {"core": 32, "mem": 131072})
    snapshot = synthetic_snapshot(system, queued, BUSY_FOR_70_PERCENT_OF_NODES, seed=0)
    request = snapshot_to_pb(snapshot)
    request.dispatcher = pb.Dispatcher.ValueType(DISPATCHER_NAMES[dispatcher])
    request.predictor = pb.PREDICTOR_WALLTIME
    full_walls = []
    first_full = client.dispatch(request, timeout=timeout)  # warm-up: builds the node table
    for _ in range(repeats):
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
    return SessionRow(nodes, len(request.running_jobs), queued, dispatcher,
                      statistics.median(full_walls), statistics.median(session_walls),
                      session_mb, same)


def run(target: str, cases: list[tuple[int, int]], dispatchers: list[str], repeats: int,
        timeout: float) -> list[SessionRow]:
    """Print and return one row per (nodes, queued) case and dispatcher."""
    print(HEADER, flush=True)
    rows = []
    with DispatcherClient(target, timeout=timeout) as client:
        for nodes, queued in cases:
            for dispatcher in dispatchers:
                row = measure(client, nodes, queued, dispatcher, repeats, timeout)
                print(row.markdown(), flush=True)
                rows.append(row)
    return rows
