"""Decision time and model size of every dispatcher on KIT-size and Eurora-size snapshots.

Each instance: 100 queued jobs, the machine about 70 % busy (hpcdispatch.synthetic), sent
through a real service on loopback. Prints one row per system × dispatcher × profile with the
median over the seeds, and the ratio of the median decision time to EASY's on the same
instances (measured in the same run).

    python -m benchmarks.decision_cost.snapshot_decisions [--seeds 3] [--profiles book,papers]
"""

from __future__ import annotations

import argparse
import statistics
import time

from hpcdispatch.catalog import CP_DISPATCHER_NAMES, DISPATCHER_NAMES
from hpcdispatch.client import DispatcherClient
from hpcdispatch.proto_convert import snapshot_to_pb
from hpcdispatch.server.rpc.embedded import embedded_server
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import PRESETS
from hpcdispatch.v1 import dispatcher_pb2 as pb

ORDER = list(DISPATCHER_NAMES)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--systems", default="eurora,kit-forhlr2")
    parser.add_argument("--profiles", default="book")  # `fast` until issue #49
    parser.add_argument("--dispatchers", default=",".join(ORDER))
    args = parser.parse_args()
    print("| system | nodes | dispatcher | profile | decision ms (median) | × EASY | build ms |"
          " solve ms | variables | constraints | started | status | objective |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    with embedded_server() as target, DispatcherClient(target, timeout=120) as client:
        for system_name in args.systems.split(","):
            system = PRESETS[system_name]
            requests = [
                snapshot_to_pb(synthetic_snapshot(system, 100, 0.7, seed=s))
                for s in range(args.seeds)
            ]
            easy_ms: float | None = None
            for name in args.dispatchers.split(","):
                profiles = args.profiles.split(",") if name in CP_DISPATCHER_NAMES else [""]
                for profile in profiles:
                    rows = []
                    for request in requests:
                        request.dispatcher = pb.Dispatcher.ValueType(DISPATCHER_NAMES[name])
                        request.search.profile = profile
                        started = time.perf_counter()
                        response = client.dispatch(request)
                        wall = (time.perf_counter() - started) * 1000
                        rows.append((wall, response))
                    med = statistics.median(w for w, _ in rows)
                    if name == "easy":
                        easy_ms = med
                    reports = [r.report for _, r in rows]
                    ratio = f"{med / easy_ms:.1f}" if easy_ms else "–"
                    objectives = [r.objective for r in reports if r.HasField("objective")]
                    objective = f"{statistics.mean(objectives):.2f}" if objectives else "–"
                    statuses = sorted({pb.SolveStatus.Name(r.status)[13:] for r in reports})
                    print(
                        f"| {system_name} | {system.node_count} | {name} | {profile or '–'} "
                        f"| {med:.1f} | {ratio} "
                        f"| {statistics.median(r.build_seconds for r in reports) * 1000:.1f} "
                        f"| {statistics.median(r.solve_seconds for r in reports) * 1000:.1f} "
                        f"| {statistics.median(r.model_variables for r in reports):.0f} "
                        f"| {statistics.median(r.model_constraints for r in reports):.0f} "
                        f"| {statistics.median(len(r.starts) for _, r in rows):.0f} "
                        f"| {','.join(statuses)} | {objective} |",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
