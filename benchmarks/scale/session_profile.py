"""In-process profile of session decisions at scale (what
docs/benchmarks/decision-cost-at-scale.md §4.2 measures, minus the transport): the session state
of a synthetic instance, then `--repeats` times one UpdateSession's server side as
SessionServicer runs it, minus gRPC, admission and metrics: the delta (a running job ends, a job
is submitted) checked as a protobuf request (`check_delta`) and applied (as `apply_checked`
applies it), then the decision on the state's situation (its snapshot, occupancy, check facts
and kept queued durations: `decide_on`) and the answer's starts encoded (`add_starts`), the
heap frozen once the session is open as the service freezes it (`sessions/heap.py`); the median
and fastest CPU times (the calling thread's) of the whole and of each stage, and the last call
under cProfile.

    python -m benchmarks.scale.session_profile [--nodes 100000] [--queued 1000]
        [--dispatchers easy,pcp20] [--profile book] [--repeats 5] [--top 25] [--no-profile]
        [--before REV --rounds 3]

`--before REV`: the same calls (this module's, without the profiler) on the code of commit REV,
exported with `git archive` and laid out as the installed package
(`benchmarks.scale.baseline_server`), and on this checkout, each in its own process, the two
alternating for `--rounds` rounds; then a table of both sides' medians over every call.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.scale.sessions import BUSY_FOR_70_PERCENT_OF_NODES
from hpcdispatch.catalog import DISPATCHER_NAMES
from hpcdispatch.proto_convert import add_starts
from hpcdispatch.server.config import load_config
from hpcdispatch.server.domain.duration_predictor import DurationPredictor
from hpcdispatch.server.domain.profiles import DEFAULT_PROFILE, PROFILES
from hpcdispatch.server.domain.search_control import SearchControl
from hpcdispatch.server.intake.session_delta import check_delta
from hpcdispatch.server.pipeline import DecisionResult, decide_on, open_predictors
from hpcdispatch.server.sessions.state import SessionState
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import homogeneous
from hpcdispatch.v1 import dispatcher_pb2 as pb

# The stages of one call, in order (CPU seconds of the calling thread each: on a shared
# machine wall time measures the other processes too).
STAGES = ("delta check", "apply", "decision", "answer")


def decide(state: SessionState, kind: int, predictor: DurationPredictor,
           profile: str = DEFAULT_PROFILE) -> DecisionResult:
    """One session decision as SessionServicer._decide makes it (`predictor`: walltime): on
    the state's situation, with the queued durations it keeps."""
    control = SearchControl(settings=PROFILES[profile][0], deadline=time.monotonic() + 120)
    return decide_on(state.situation(pb.PREDICTOR_WALLTIME, predictor), kind, predictor,
                     control)


def delta(state: SessionState, ended: str, repeat: int, profile: str) -> pb.UpdateSessionRequest:
    """The next delta, deciding: one running job ends, one job of 8 cores is submitted."""
    request = pb.UpdateSessionRequest(
        session_id="bench", sequence=state.sequence + 1, time=state.time + 1,
        ended_job_ids=[ended], decide=True, predictor=pb.PREDICTOR_WALLTIME)
    request.search.profile = profile
    request.submitted.add(id=f"new{repeat}", user="u1", submit_time=state.time + 1, units=1,
                          unit_request={"core": 8}, requested_time=3600)
    return request


def call(state: SessionState, request: pb.UpdateSessionRequest, kind: int,
         predictor: DurationPredictor, profile: str, seconds: dict[str, float]) -> DecisionResult:
    """One deciding UpdateSession's server side (see the module doc), each stage's CPU
    seconds (this thread's) added to `seconds`."""
    began = time.thread_time()
    checked = check_delta(state, request, CONFIG, [pb.PREDICTOR_WALLTIME])
    assert checked.ok, (checked.violations, checked.failure)
    lap = time.thread_time()
    seconds["delta check"] += lap - began
    state.apply(request.time, request.sequence, checked.node_changes, request.ended_job_ids,
                request.cancelled_job_ids, checked.submitted, checked.started, checked.windows)
    seconds["apply"] += time.thread_time() - lap
    lap = time.thread_time()
    result = decide(state, kind, predictor, profile)
    seconds["decision"] += time.thread_time() - lap
    lap = time.thread_time()
    response = pb.DispatchResponse(time=state.time)
    add_starts(response, result.decision.starts,
               {q.id: q.unit_request for q in state.queued.values()})
    seconds["answer"] += time.thread_time() - lap
    return result


CONFIG = load_config(env={})


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
    parser.add_argument("--before", metavar="REV", help="also run the calls on commit REV")
    parser.add_argument("--rounds", type=int, default=3, help="with --before: rounds of both")
    args = parser.parse_args()
    if args.before:
        side_by_side(args.before, args.rounds, [
            "--nodes", str(args.nodes), "--queued", str(args.queued), "--dispatchers",
            args.dispatchers, "--busy", str(args.busy), "--profile", args.profile,
            "--repeats", str(args.repeats), "--no-profile"])
        return
    predictors = open_predictors()  # walltime, as the service's registry makes it
    walltime = predictors.predictor("bench", pb.PREDICTOR_WALLTIME)
    system = homogeneous(f"h{args.nodes}", args.nodes, {"core": 32, "mem": 131072})
    snapshot = synthetic_snapshot(system, args.queued, args.busy, seed=0)
    for name in args.dispatchers.split(","):
        kind = DISPATCHER_NAMES[name]
        state = SessionState("bench", snapshot)
        gc.freeze()  # as the service does once a session opens (sessions/heap.py)
        # The first decision predicts the running jobs once.
        decide(state, kind, walltime, args.profile)
        cpus: list[float] = []
        laps: list[dict[str, float]] = []
        profiler = None
        for repeat in range(args.repeats):
            request = delta(state, snapshot.running[repeat].id, repeat, args.profile)
            last = repeat == args.repeats - 1
            profiler = None if args.no_profile or not last else cProfile.Profile()
            seconds = dict.fromkeys(STAGES, 0.0)
            began = time.thread_time()
            if profiler is not None:
                profiler.enable()
            result = call(state, request, kind, walltime, args.profile, seconds)
            if profiler is not None:
                profiler.disable()
            cpus.append(time.thread_time() - began)
            laps.append(seconds)
        stages = {k: round(v, 4) for k, v in result.stage_seconds.items()}
        medians = {k: round(statistics.median(lap[k] for lap in laps) * 1000, 1)
                   for k in STAGES}
        print("RESULT " + json.dumps({"dispatcher": name, "cpu": cpus, "stages": laps,
                                      "started": len(result.decision.starts)}))
        print(f"== {name}: CPU median {statistics.median(cpus) * 1000:.1f} ms, fastest "
              f"{min(cpus) * 1000:.1f} ms over {len(cpus)} calls; "
              f"{len(result.decision.starts)} started; median ms by stage {medians}; "
              f"the last decision's pipeline stages {stages}")
        if profiler is not None:
            stats = pstats.Stats(profiler)
            stats.sort_stats("tottime").print_stats(args.top)
            stats.sort_stats("cumulative").print_stats(args.top)
    predictors.close()

def side_by_side(rev: str, rounds: int, argv: list[str]) -> None:
    """This module's calls on commit `rev` and on this checkout, alternating (see the module
    doc); prints each run's lines and the table."""
    from benchmarks.scale.baseline_server import REPO, export, package_tree

    got: dict[tuple[str, str], list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        source, tree = Path(tmp, "src"), Path(tmp, "pkg")
        full = export(rev, source)
        package_tree(source, tree)
        (tree / "benchmarks").symlink_to(source / "benchmarks", target_is_directory=True)
        paths = {"before": str(tree), "after": str(REPO)}
        for _ in range(rounds):
            for side, path in paths.items():
                out = subprocess.run([sys.executable, __file__, *argv], check=True, text=True,
                                     capture_output=True, cwd=tmp,
                                     env={**os.environ, "PYTHONPATH": path}).stdout
                print(f"-- {side}: " + "\n".join(
                    line for line in out.splitlines() if line.startswith("==")), flush=True)
                for line in out.splitlines():
                    if line.startswith("RESULT "):
                        row = json.loads(line.removeprefix("RESULT "))
                        got.setdefault((row["dispatcher"], side), []).append(row)
    print(f"\nbefore = {rev} ({full[:9]}), after = this checkout; CPU ms of one deciding "
          f"UpdateSession's server side, median over {rounds} rounds of every call\n")
    print("| dispatcher | before p50 | after p50 | after ÷ before | "
          + " | ".join(f"{s} before → after" for s in STAGES) + " | started |")
    print("|---" * (5 + len(STAGES)) + "|")
    for name in argv[argv.index("--dispatchers") + 1].split(","):
        cells = []
        medians = {}
        for side in ("before", "after"):
            runs = got[(name, side)]
            medians[side] = (statistics.median(c for r in runs for c in r["cpu"]) * 1000,
                             {k: statistics.median(lap[k] for r in runs for lap in r["stages"])
                              * 1000 for k in STAGES})
        (old, old_stages), (new, new_stages) = medians["before"], medians["after"]
        cells = [f"{old_stages[k]:,.1f} → {new_stages[k]:,.1f}" for k in STAGES]
        print(f"| {name} | {old:,.0f} | {new:,.0f} | {new / old:.2f}× | " + " | ".join(cells)
              + f" | {got[(name, 'after')][0]['started']:,} |")


if __name__ == "__main__":
    main()
