"""In-process timing of Dispatch's request side at scale: node table, validation, conversion,
answer — the reference path (validate_dispatch_request, then snapshot_from_pb) next to the
service's (`take_in`: one pass, running jobs from the cache), alternated in one process.

The instance is `scale --sessions`' (32 cores, 128 GiB per node, one running job on about 70 %
of the nodes). "Next snapshot" is the steady state: the previous snapshot's running jobs are
cached and the new one has one job ended and one started. The node table's digest "before" is
the one the service used until then (nodes copied into a message, serialized deterministically);
a node list with one node changed is built from scratch before, reusing the others after.
Times are this process's CPU time (time.process_time), which other processes on a shared
machine disturb far less than wall time; the stages are single-threaded.

    python -m benchmarks.scale.request_stages [--nodes 100000] [--queued 1000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time
from collections.abc import Callable
from contextlib import closing
from typing import TypeVar

from benchmarks.scale.sessions import BUSY_FOR_70_PERCENT_OF_NODES
from hpcdispatch.proto_convert import snapshot_from_pb, snapshot_to_pb
from hpcdispatch.server.config import ServerConfig
from hpcdispatch.server.domain.profiles import DEFAULT_PROFILE, PROFILES
from hpcdispatch.server.domain.search_control import SearchControl
from hpcdispatch.server.intake.node_table import NodeTables, build_node_table
from hpcdispatch.server.intake.running_job_cache import RunningJobCache
from hpcdispatch.server.intake.snapshot_intake import take_in
from hpcdispatch.server.intake.validation import validate_dispatch_request
from hpcdispatch.server.pipeline import open_predictors, run_decision
from hpcdispatch.server.rpc.decision_front import DecisionFront
from hpcdispatch.server.rpc.metrics import ServiceMetrics
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import homogeneous
from hpcdispatch.v1 import dispatcher_pb2 as pb

T = TypeVar("T")


def old_node_list_digest(request: pb.DispatchRequest) -> bytes:
    """The node-table key before: the nodes copied into a message, serialized sorted."""
    nodes_only = pb.DispatchRequest()
    nodes_only.nodes.extend(request.nodes)
    data = nodes_only.SerializeToString(deterministic=True)
    return hashlib.blake2b(data, digest_size=16).digest()


def next_snapshot(request: pb.DispatchRequest, step: int) -> pb.DispatchRequest:
    """`request` one second later: its first running job ended, a copy of it started."""
    later = pb.DispatchRequest()
    later.CopyFrom(request)
    later.time = request.time + step
    ended = later.running_jobs[0]
    started = pb.RunningJob()
    started.CopyFrom(ended)
    started.id, started.start_time = f"{ended.id}-again{step}", later.time
    del later.running_jobs[0]
    later.running_jobs.append(started)
    return later


def timed(times: dict[str, list[float]], stage: str, call: Callable[[], T]) -> T:
    began = time.process_time()
    result = call()
    times.setdefault(stage, []).append((time.process_time() - began) * 1000)
    return result


def one_step(
    times: dict[str, list[float]], request: pb.DispatchRequest, tables: NodeTables,
    cache: RunningJobCache, front: DecisionFront,
) -> None:
    """Every stage, before and after, on one snapshot; both give the same Snapshot."""
    config = front.config
    kinds: list[int] = [pb.PREDICTOR_WALLTIME, pb.PREDICTOR_ORACLE]
    timed(times, "node table digest, before", lambda: old_node_list_digest(request))
    table = timed(times, "node table, after (hit)", lambda: tables.get(request))
    violations = timed(times, "validate, before", lambda: validate_dispatch_request(
        request, config, kinds, table.check))
    assert not violations, violations[:3]
    old = timed(times, "convert, before", lambda: snapshot_from_pb(request, table.nodes))
    # `take_in` gets the node table itself: a hit, as timed above.
    intake = timed(times, "validate + convert, after (cached running jobs)",
                   lambda: take_in(request, config, kinds, tables, cache))
    assert intake.snapshot == old, "the two paths disagree"
    control = SearchControl(settings=PROFILES[DEFAULT_PROFILE][0], deadline=time.monotonic() + 120)
    walltime = front.predictors.predictor("default", pb.PREDICTOR_WALLTIME)
    result = run_decision(old, pb.DISPATCHER_EASY, walltime, control, table.index)
    timed(times, "answer", lambda: front.answer(
        old, result, pb.DISPATCHER_EASY, pb.PREDICTOR_WALLTIME, control.settings, "default",
        time.monotonic()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--queued", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    system = homogeneous(f"h{args.nodes}", args.nodes, {"core": 32, "mem": 131072})
    base = snapshot_to_pb(synthetic_snapshot(system, args.queued, BUSY_FOR_70_PERCENT_OF_NODES,
                                             seed=0))
    base.predictor = pb.PREDICTOR_WALLTIME
    config = ServerConfig()
    kinds: list[int] = [pb.PREDICTOR_WALLTIME, pb.PREDICTOR_ORACLE]
    tables, cache = NodeTables(), RunningJobCache()
    times: dict[str, list[float]] = {}
    timed(times, "node table, first request of the list", lambda: tables.get(base))
    timed(times, "running jobs, first request (all checked)",
          lambda: take_in(base, config, kinds, tables, cache))
    with closing(open_predictors()) as registry:
        front = DecisionFront(config, registry, ServiceMetrics())
        for step in range(1, args.repeats + 1):
            base = next_snapshot(base, step)
            one_step(times, base, tables, cache, front)
        for step in range(args.repeats):  # one node changes state: a new node list
            changed = pb.DispatchRequest()
            changed.nodes.extend(base.nodes)
            changed.nodes[step].state = pb.NODE_STATE_DRAINED
            timed(times, "node table, one node changed, before (from scratch)",
                  lambda: build_node_table(changed))  # noqa: B023
            timed(times, "node table, one node changed, after (unchanged nodes reused)",
                  lambda: tables.get(changed))  # noqa: B023
            tables.get(base)
    print(f"{args.nodes:,} nodes, {len(base.running_jobs):,} running, {args.queued:,} queued; "
          f"median of {args.repeats} (CPU ms), cache {cache.hits:,} hits / {cache.misses:,} misses")
    print("| stage | ms p50 | all |\n|---|---|---|")
    for stage, values in times.items():
        print(f"| {stage} | {statistics.median(values):,.1f} | "
              f"{', '.join(f'{v:.0f}' for v in values)} |")


if __name__ == "__main__":
    main()
