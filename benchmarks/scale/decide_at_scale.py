"""One decision per system size and dispatcher, in-process, each case in its own process under
a memory cap: the table of issue #49 (every node running work, `hpcdispatch.synthetic` with
busy = 1.0, a queue of Q jobs, requested times as durations).

Each case runs in a fresh process (RLIMIT_AS = --memory-gb) that first decides one small
instance (imports and caches warm), then times one decision of the case: CPU and wall seconds,
peak RSS, jobs started, status, and whether the pipeline fell back. The ratio is each
dispatcher's CPU time over EASY's on the same instance, in the same run.

    python -m benchmarks.scale.decide_at_scale [--cases 1000:1000,10000:200,10000:5000,100000:200]
        [--dispatchers easy,pcp20/qos,pcp20/book,pcp20/book@arrival,conservative]
        [--deadline 60] [--memory-gb 10]
"""

from __future__ import annotations

import argparse
import dataclasses
import resource
import time

from benchmarks.scale.capped_child import run_capped

DEFAULT_CASES = "1000:1000,10000:200,10000:5000,100000:200,100000:1000"
DEFAULT_DISPATCHERS = "easy,pcp20/qos,pcp20/book,pcp20/book@arrival,conservative"


def _one(nodes: int, queued: int, spec: str, deadline: float) -> dict[str, object]:
    """The case, decided in this process (see the module's doc)."""
    from hpcdispatch.catalog import DISPATCHER_NAMES
    from hpcdispatch.server.domain.outcome_kinds import SolveStatus
    from hpcdispatch.server.domain.profiles import DEFAULT_PROFILE, PROFILES
    from hpcdispatch.server.domain.promise_ladder import rung
    from hpcdispatch.server.domain.search_control import SearchControl
    from hpcdispatch.server.pipeline import open_predictors, run_decision
    from hpcdispatch.synthetic import synthetic_snapshot
    from hpcdispatch.systems import homogeneous
    from hpcdispatch.v1 import dispatcher_pb2 as pb

    name, _, profile = spec.partition("/")
    profile, _, rung_name = profile.partition("@")
    settings = PROFILES[profile or DEFAULT_PROFILE][0]
    if rung_name:
        settings = dataclasses.replace(settings, promise_after_s=rung(rung_name).promise_after_s)
    walltime = open_predictors().predictor("bench", pb.PREDICTOR_WALLTIME)
    kind = DISPATCHER_NAMES[name]
    warm = synthetic_snapshot(homogeneous("warm", 16, {"core": 32, "mem": 131072}), 8, 1.0)
    run_decision(warm, kind, walltime, SearchControl(settings=settings,
                                                      deadline=time.monotonic() + 60))
    system = homogeneous(f"h{nodes}", nodes, {"core": 32, "mem": 131072})
    snapshot = synthetic_snapshot(system, queued, 1.0, seed=0)
    control = SearchControl(settings=settings, deadline=time.monotonic() + deadline)
    wall, cpu = time.perf_counter(), time.process_time()
    result = run_decision(snapshot, kind, walltime, control)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"cpu": cpu, "wall": wall, "started": len(result.decision.starts),
            "status": SolveStatus(result.outcome.status).name,
            "fallback": result.fallback_code,
            "rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6}


def _case(nodes: int, queued: int, spec: str, deadline: float, memory_gb: float
          ) -> dict[str, object]:
    """`_one` in a child process under the memory cap; its error if it fails."""
    return run_capped("benchmarks.scale.decide_at_scale", "_one", (nodes, queued, spec, deadline),
                      deadline, memory_gb)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale.decide_at_scale",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=DEFAULT_CASES, help="NODES:QUEUED,…")
    parser.add_argument("--dispatchers", default=DEFAULT_DISPATCHERS,
                        help="NAME[/PROFILE[@RUNG]],… (the first is the ratios' base)")
    parser.add_argument("--deadline", type=float, default=60.0, help="request deadline, s")
    parser.add_argument("--memory-gb", type=float, default=10.0)
    args = parser.parse_args()
    specs = args.dispatchers.split(",")
    print(f"| nodes × queued | dispatcher | CPU s | × {specs[0]} | wall s | started | status "
          "| fallback | peak RSS GB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for case in args.cases.split(","):
        nodes, queued = (int(x) for x in case.split(":"))
        base: float | None = None
        for spec in specs:
            row = _case(nodes, queued, spec, args.deadline, args.memory_gb)
            if "error" in row:
                print(f"| {nodes:,} × {queued:,} | {spec} | – | – | – | – | {row['error']} "
                      "| – | – |", flush=True)
                continue
            cpu = float(row["cpu"])  # type: ignore[arg-type]
            if base is None:
                base = cpu
            print(f"| {nodes:,} × {queued:,} | {spec} | {cpu:.2f} | {cpu / base:.1f} "
                  f"| {float(row['wall']):.2f} | {row['started']} "  # type: ignore[arg-type]
                  f"| {row['status']} | {row['fallback'] or '–'} "
                  f"| {float(row['rss_gb']):.2f} |", flush=True)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
