"""In-process profile of session decisions at scale (what
docs/benchmarks/decision-cost-at-scale.md §4.2 measures, minus gRPC): the session state of a
synthetic instance, then `--repeats` times one delta (a running job ends, a job is submitted)
and a decision (the session's snapshot and occupancy, then `run_decision`); the median and
fastest wall times, and the last decision under cProfile.

    python -m benchmarks.scale.session_profile [--nodes 100000] [--queued 1000]
        [--dispatchers easy,pcp20] [--profile book] [--repeats 5] [--top 25] [--no-profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time

from benchmarks.scale.sessions import BUSY_FOR_70_PERCENT_OF_NODES
from hpcdispatch.catalog import DISPATCHER_NAMES
from hpcdispatch.server.domain.duration_predictor import DurationPredictor
from hpcdispatch.server.domain.profiles import DEFAULT_PROFILE, PROFILES
from hpcdispatch.server.domain.search_control import SearchControl
from hpcdispatch.server.pipeline import DecisionResult, open_predictors, run_decision
from hpcdispatch.server.sessions.state import SessionState
from hpcdispatch.snapshot import QueuedJob
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import homogeneous
from hpcdispatch.v1 import dispatcher_pb2 as pb


def decide(state: SessionState, kind: int, predictor: DurationPredictor,
           profile: str = DEFAULT_PROFILE) -> DecisionResult:
    """One session decision as SessionServicer._decide makes it (`predictor`: walltime)."""
    control = SearchControl(settings=PROFILES[profile][0], deadline=time.monotonic() + 120)
    snapshot = state.snapshot(pb.PREDICTOR_WALLTIME, predictor)
    occupancy = state.occupancy(pb.PREDICTOR_WALLTIME, predictor)
    return run_decision(snapshot, kind, predictor, control, state.node_index(),
                        occupancy=occupancy, facts=state)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--queued", type=int, default=1000)
    parser.add_argument("--dispatchers", default="easy,pcp20")
    parser.add_argument("--busy", type=float, default=BUSY_FOR_70_PERCENT_OF_NODES,
                        help="share of the cores in use (default: one job on 70 %% of the nodes)")
    parser.add_argument("--profile", default=DEFAULT_PROFILE,
                        help="the CP dispatchers' search profile")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-profile", action="store_true", help="only time the decisions")
    args = parser.parse_args()
    predictors = open_predictors()  # walltime, as the service's registry makes it
    walltime = predictors.predictor("bench", pb.PREDICTOR_WALLTIME)
    system = homogeneous(f"h{args.nodes}", args.nodes, {"core": 32, "mem": 131072})
    snapshot = synthetic_snapshot(system, args.queued, args.busy, seed=0)
    for name in args.dispatchers.split(","):
        kind = DISPATCHER_NAMES[name]
        state = SessionState("bench", snapshot)
        # The first decision predicts the running jobs once.
        decide(state, kind, walltime, args.profile)
        walls: list[float] = []
        profiler = None
        for repeat in range(args.repeats):
            state.time += 1
            state.end([snapshot.running[repeat].id])
            state.submit([QueuedJob(id=f"new{repeat}", user="u1", name="", queue="",
                                    submit_time=state.time, units=1,
                                    unit_request={"core": 8}, requested_time=3600)])
            last = repeat == args.repeats - 1
            profiler = None if args.no_profile or not last else cProfile.Profile()
            began = time.perf_counter()
            if profiler is not None:
                profiler.enable()
            result = decide(state, kind, walltime, args.profile)
            if profiler is not None:
                profiler.disable()
            walls.append(time.perf_counter() - began)
        stages = {k: round(v, 4) for k, v in result.stage_seconds.items()}
        print(f"== {name}: median {statistics.median(walls) * 1000:.1f} ms, fastest "
              f"{min(walls) * 1000:.1f} ms over {len(walls)} decisions; "
              f"{len(result.decision.starts)} started, last stages {stages}")
        if profiler is not None:
            stats = pstats.Stats(profiler)
            stats.sort_stats("tottime").print_stats(args.top)
            stats.sort_stats("cumulative").print_stats(args.top)
    predictors.close()

if __name__ == "__main__":
    main()
