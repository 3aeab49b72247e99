"""The CP decision's cost with a site's rules and without them (issue #50, item 2), side by
side in one run: `hpcdispatch.synthetic` on NODES identical nodes (busy 0.7, Q queued jobs,
requested times as durations; each job's units × U), once as it is and once with the rules
added, the same jobs
and running work otherwise:

- node k in partition p{k mod P}, with the feature "fast" where k mod 4 = 0;
- each queued job in one or two random partitions, 30 % requiring "fast", a priority in 0..9;
- a maintenance of partition p0's nodes from t + 1,800 s for 3 h, and a reservation of 16
  nodes of p1 for user u1 over [t, t + 24 h).

Each (model, profile, variant) is decided once untimed (caches warm), then R times in this
process, alternating with and without; the table gives the median CPU seconds of a decision
(`run_decision`, the independent check included), its build seconds and model variables, the
jobs started, the status and the fallback, and the ratio with / without on the same snapshot.

    python -m benchmarks.scale.cp_site_rules [--nodes 1000] [--partitions 8] [--queued 200]
        [--busy 1.0] [--units 1] [--models pcp20,pcp19,hcp19] [--profiles qos,book] [--repeat 3]
        [--deadline 30]
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import time

from hpcdispatch.snapshot import Snapshot, UnavailabilityWindow


def with_rules(snapshot: Snapshot, partitions: int, seed: int = 1) -> Snapshot:
    """`snapshot` with partitions, features, priorities and two windows (see the module)."""
    rng = random.Random(seed)
    nodes = tuple(dataclasses.replace(n, partitions=(f"p{k % partitions}",),
                                      features=("fast",) if k % 4 == 0 else ())
                  for k, n in enumerate(snapshot.nodes))
    names = [f"p{p}" for p in range(partitions)]
    queued = tuple(dataclasses.replace(
        q, partitions=tuple(sorted(rng.sample(names, rng.choice([1, 2])))),
        required_features=("fast",) if rng.random() < 0.3 else (),
        priority=rng.randrange(10)) for q in snapshot.queued)
    t = snapshot.time
    p0 = tuple(n.id for n in nodes if n.partitions == ("p0",))
    p1 = tuple(n.id for n in nodes if n.partitions == ("p1",))[:16]
    windows = (UnavailabilityWindow(p0, t + 1_800, t + 1_800 + 3 * 3_600),
               UnavailabilityWindow(p1, t, t + 86_400, users=("u1",)))
    return dataclasses.replace(snapshot, nodes=nodes, queued=queued, windows=windows)


def main() -> None:
    from hpcdispatch.catalog import DISPATCHER_NAMES
    from hpcdispatch.server.domain.outcome_kinds import SolveStatus
    from hpcdispatch.server.domain.profiles import PROFILES
    from hpcdispatch.server.domain.search_control import SearchControl
    from hpcdispatch.server.pipeline import open_predictors, run_decision
    from hpcdispatch.synthetic import synthetic_snapshot
    from hpcdispatch.systems import homogeneous
    from hpcdispatch.v1 import dispatcher_pb2 as pb

    parser = argparse.ArgumentParser(prog="python -m benchmarks.scale.cp_site_rules",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--queued", type=int, default=200)
    parser.add_argument("--busy", type=float, default=1.0)
    parser.add_argument("--units", type=int, default=1,
                        help="each queued job's units × this (8: the model is searched "
                        "without rules too)")
    parser.add_argument("--models", default="pcp20,pcp19,hcp19")
    parser.add_argument("--profiles", default="qos,book")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--deadline", type=float, default=30.0, help="request deadline, s")
    args = parser.parse_args()
    walltime = open_predictors().predictor("bench", pb.PREDICTOR_WALLTIME)
    system = homogeneous(f"h{args.nodes}", args.nodes, {"core": 32, "mem": 131072})
    plain = synthetic_snapshot(system, args.queued, args.busy, seed=0)
    plain = dataclasses.replace(plain, queued=tuple(
        dataclasses.replace(q, units=q.units * args.units) for q in plain.queued))
    ruled = with_rules(plain, args.partitions)
    print(f"{args.nodes:,} nodes, {args.partitions} partitions, {args.queued} queued, "
          f"busy {args.busy}, units × {args.units}, median of {args.repeat}")
    print("| model/profile | rules | CPU s | × without | build s | variables | started "
          "| status | fallback |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model in args.models.split(","):
        for profile in args.profiles.split(","):
            settings = PROFILES[profile][0]
            rows: dict[str, list[tuple[float, float, int, int, str, str]]] = {
                "without": [], "with": []}
            for k in range(args.repeat + 1):  # the first round warms the caches, untimed
                for variant, snapshot in (("without", plain), ("with", ruled)):
                    control = SearchControl(settings=settings,
                                            deadline=time.monotonic() + args.deadline)
                    cpu = time.process_time()
                    result = run_decision(snapshot, DISPATCHER_NAMES[model], walltime, control)
                    cpu = time.process_time() - cpu
                    outcome = result.outcome
                    if k == 0:
                        continue
                    rows[variant].append((cpu, outcome.build_seconds, outcome.variables,
                                          len(result.decision.starts),
                                          SolveStatus(outcome.status).name,
                                          result.fallback_code or "–"))
            base = statistics.median(r[0] for r in rows["without"])
            for variant in ("without", "with"):
                runs = rows[variant]
                cpu = statistics.median(r[0] for r in runs)
                build = statistics.median(r[1] for r in runs)
                last = runs[-1]
                print(f"| {model}/{profile} | {variant} | {cpu:.2f} | {cpu / base:.2f} "
                      f"| {build:.3f} | {last[2]:,} | {last[3]} | {last[4]} | {last[5]} |",
                      flush=True)


if __name__ == "__main__":
    main()
