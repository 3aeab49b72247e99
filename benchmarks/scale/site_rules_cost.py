"""What a site's rules cost one decision (issue #50 item 5): the same synthetic snapshot
(`hpcdispatch.synthetic`, every node running work, a queue of Q jobs, requested times as
durations) decided plain, with 8 partitions and feature constraints, and with those and a
maintenance window, side by side in one run; the ratio is each variant's CPU time over the
plain snapshot's, per dispatcher.

The rules: node n is in partition p(n mod 8); even nodes have the feature "ib", every fourth
also "a100". Three jobs in four ask for one partition (job k: p(k mod 8)), the rest for none
(every node); every third job requires "ib". The window ("+ window"): partition p0's nodes
under maintenance over [t + 3,600, t + 7,200), admitting nobody.

Each (case, dispatcher, variant) runs in a fresh process under a memory cap, which first decides
one small instance (imports and caches warm), then times one decision, as
`benchmarks.scale.decide_at_scale` does.

    python -m benchmarks.scale.site_rules_cost [--cases 10000:1000] \
        [--dispatchers easy,conservative,pcp20/book] [--deadline 60] [--memory-gb 10]
"""

from __future__ import annotations

import argparse

from benchmarks.scale.capped_child import run_capped

DEFAULT_CASES = "10000:1000"
DEFAULT_DISPATCHERS = "easy,conservative,pcp20/book"
VARIANTS = ("plain", "rules", "rules+window")
PARTITIONS = 8


def ruled(snapshot: object, variant: str) -> object:
    """`snapshot` with the module's rules (`variant` "rules" or "rules+window")."""
    import dataclasses

    from hpcdispatch.snapshot import Snapshot, UnavailabilityWindow

    assert isinstance(snapshot, Snapshot)
    nodes = tuple(dataclasses.replace(
        node, partitions=(f"p{n % PARTITIONS}",),
        features=(("ib", "a100") if n % 4 == 0 else ("ib",) if n % 2 == 0 else ()))
        for n, node in enumerate(snapshot.nodes))
    queued = tuple(dataclasses.replace(
        job, partitions=(f"p{k % PARTITIONS}",) if k % 4 else (),
        required_features=("ib",) if k % 3 == 0 else ())
        for k, job in enumerate(snapshot.queued))
    windows: tuple[UnavailabilityWindow, ...] = ()
    if variant == "rules+window":
        t = snapshot.time
        windows = (UnavailabilityWindow(tuple(n.id for n in nodes[::PARTITIONS]), t + 3_600,
                                        t + 7_200),)
    return dataclasses.replace(snapshot, nodes=nodes, queued=queued, windows=windows)


def _one(nodes: int, queued: int, spec: str, variant: str, deadline: float
         ) -> dict[str, object]:
    """The case, decided in this process (see the module's doc)."""
    import resource
    import time

    from hpcdispatch.catalog import DISPATCHER_NAMES
    from hpcdispatch.server.domain.outcome_kinds import SolveStatus
    from hpcdispatch.server.domain.profiles import PROFILES
    from hpcdispatch.server.domain.search_control import SearchControl
    from hpcdispatch.server.pipeline import open_predictors, run_decision
    from hpcdispatch.synthetic import synthetic_snapshot
    from hpcdispatch.systems import homogeneous
    from hpcdispatch.v1 import dispatcher_pb2 as pb

    name, _, profile = spec.partition("/")
    settings = PROFILES[profile or "book"][0]
    walltime = open_predictors().predictor("bench", pb.PREDICTOR_WALLTIME)
    kind = DISPATCHER_NAMES[name]
    warm = synthetic_snapshot(homogeneous("warm", 16, {"core": 32, "mem": 131072}), 8, 1.0)
    if variant != "plain":
        warm = ruled(warm, variant)  # type: ignore[assignment]
    run_decision(warm, kind, walltime, SearchControl(settings=settings,
                                                      deadline=time.monotonic() + 60))
    system = homogeneous(f"h{nodes}", nodes, {"core": 32, "mem": 131072})
    snapshot = synthetic_snapshot(system, queued, 1.0, seed=0)
    if variant != "plain":
        snapshot = ruled(snapshot, variant)  # type: ignore[assignment]
    control = SearchControl(settings=settings, deadline=time.monotonic() + deadline)
    wall, cpu = time.perf_counter(), time.process_time()
    result = run_decision(snapshot, kind, walltime, control)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"cpu": cpu, "wall": wall, "started": len(result.decision.starts),
            "planned": len(result.outcome.expected_starts),
            "status": SolveStatus(result.outcome.status).name,
            "fallback": result.fallback_code,
            "rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6}


def _case(nodes: int, queued: int, spec: str, variant: str, deadline: float, memory_gb: float
          ) -> dict[str, object]:
    """`_one` in a child process under the memory cap; its error if it fails."""
    return run_capped("benchmarks.scale.site_rules_cost", "_one",
                      (nodes, queued, spec, variant, deadline), deadline, memory_gb)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale.site_rules_cost",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=DEFAULT_CASES, help="NODES:QUEUED,…")
    parser.add_argument("--dispatchers", default=DEFAULT_DISPATCHERS,
                        help="NAME[/PROFILE],…")
    parser.add_argument("--deadline", type=float, default=60.0, help="request deadline, s")
    parser.add_argument("--memory-gb", type=float, default=10.0)
    args = parser.parse_args()
    print("| nodes × queued | dispatcher | snapshot | CPU s | × plain | wall s | started "
          "| planned | status | fallback | peak RSS GB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for case in args.cases.split(","):
        nodes, queued = (int(x) for x in case.split(":"))
        for spec in args.dispatchers.split(","):
            base: float | None = None
            for variant in VARIANTS:
                row = _case(nodes, queued, spec, variant, args.deadline, args.memory_gb)
                if "error" in row:
                    print(f"| {nodes:,} × {queued:,} | {spec} | {variant} | – | – | – | – | – "
                          f"| {row['error']} | – | – |", flush=True)
                    continue
                cpu = float(row["cpu"])  # type: ignore[arg-type]
                if base is None:
                    base = cpu
                print(f"| {nodes:,} × {queued:,} | {spec} | {variant} | {cpu:.2f} "
                      f"| {cpu / base:.2f} | {float(row['wall']):.2f} "  # type: ignore[arg-type]
                      f"| {row['started']} | {row['planned']} | {row['status']} "
                      f"| {row['fallback'] or '–'} "
                      f"| {float(row['rss_gb']):.2f} |", flush=True)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
