"""The duration predictor's cost inside a decision, before and after the batched index.

At 10,000 nodes with 10,000 running jobs that carry no `expected_duration` (so each needs a
prediction) and 100 queued jobs, after a 20,000-completion history was reported, one PCP'20
decision is sent through a real service on loopback per round, for each way of predicting:

- `walltime`: the requested time (no knowledge base), for reference;
- `sqlite, one query per job`: data-driven as it was before, one SQLite query per job and rule
  (up to five per job, each under the store's lock);
- `sqlite, batched`: data-driven now, one index read per batch (at most one store round trip);
- `postgresql, batched`: the same on a PostgreSQL server, with `--postgres URL`.

The predictor is wrapped in a timer, so "predictor s" is the time spent predicting inside the
decision (the refresh query included), and the share is that over the decision's round trip.
The first decision of each way (which also loads the history into the index) is left out of
the medians and shown on its own.

    python -m benchmarks.decision_cost.predictor_cost [--nodes 10000] [--history 20000]
        [--decisions 3] [--postgres postgresql://user@host:5432/db]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import ClassVar, cast

import structlog

from hpcdispatch.client import DispatcherClient
from hpcdispatch.proto_convert import snapshot_to_pb
from hpcdispatch.server.config import ServerConfig
from hpcdispatch.server.domain.duration_predictor import (
    Completion,
    DurationPredictor,
    JobFacts,
    clamp,
    predict_many,
)
from hpcdispatch.server.logging_config import configure_logging
from hpcdispatch.server.predictors.api import ClusterHistory
from hpcdispatch.server.predictors.data_driven import resemblance_rules
from hpcdispatch.server.predictors.registry import PredictorRegistry
from hpcdispatch.server.predictors.store_sqlite import SqliteStore
from hpcdispatch.server.rpc.app import RunningServer, start_server
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import homogeneous
from hpcdispatch.v1 import dispatcher_pb2 as pb

CLUSTER = "bench"
TARGET_SHARE = 0.10  # the target: the predictor under 10 % of the decision


class OneQueryPerJob:
    """Data-driven as before the index: one SQLite query per job and rule, no batch method."""

    name: ClassVar[str] = "data_driven_per_job"

    def __init__(self, history: ClusterHistory) -> None:
        store = history.knowledge_base.store
        assert isinstance(store, SqliteStore), "the per-job way needs the SQLite store"
        self.store, self.cluster = store, history.cluster

    def predict(self, job: JobFacts) -> int:
        for rule in resemblance_rules(job):
            run_times = self.store.last_run_times(self.cluster, rule, limit=1)
            if run_times:
                return clamp(run_times[0], job)
        return clamp(job.requested_time, job)

    def learn(self, completion: Completion) -> None:
        return None


class Timed:
    """A predictor that adds the time spent in it to `seconds`."""

    name: ClassVar[str] = "timed"

    def __init__(self, inner: DurationPredictor) -> None:
        self.inner = inner
        self.seconds = 0.0

    def predict(self, job: JobFacts) -> int:
        return self.predict_many([job])[0]

    def predict_many(self, jobs: Sequence[JobFacts]) -> list[int]:
        started = time.perf_counter()
        try:
            return predict_many(self.inner, jobs)
        finally:
            self.seconds += time.perf_counter() - started

    def learn(self, completion: Completion) -> None:
        self.inner.learn(completion)


def history(count: int, seed: int = 1) -> list[Completion]:
    """Completions of the synthetic snapshot's users (u1..u20) and applications (app1..8)."""
    rng = random.Random(seed)
    completions = []
    for i in range(count):
        requested = rng.choice([600, 3600, 4 * 3600, 24 * 3600])
        facts = JobFacts(
            user=f"u{rng.randint(1, 20)}", name=f"app{rng.randint(1, 8)}", queue="",
            units=1, unit_request={"core": rng.choice([8, 16, 24, 32])},
            requested_time=requested,
        )
        end = 10_000 + i * 4
        completions.append(Completion(f"h{i}", facts, end - rng.randint(1, requested), end))
    return completions


def measure(
    label: str, store: str | None, kind: int, factory: Callable[[ClusterHistory], object] | None,
    request: pb.DispatchRequest, completions: list[Completion], decisions: int,
) -> tuple[str, float, float, float, float]:
    """(label, first decision s, median decision s, median predictor s, first predictor s)."""
    running: RunningServer = start_server(ServerConfig(listen="127.0.0.1:0", predictor_store=store))
    timers: list[Timed] = []
    # The service's registry itself (the gRPC edge holds it as the pipeline's `Predictors`).
    registry = cast(PredictorRegistry, running.predictors)
    try:
        make = factory or registry.factory(kind)

        def timed(cluster_history: ClusterHistory) -> DurationPredictor:
            timer = Timed(make(cluster_history))  # type: ignore[arg-type]
            timers.append(timer)
            return timer

        registry.register(kind, timed)
        if kind != pb.PREDICTOR_WALLTIME:
            for start in range(0, len(completions), 1_000):
                running.predictors.learn(CLUSTER, completions[start:start + 1_000])
        request.predictor = pb.Predictor.ValueType(kind)
        walls, spent = [], []
        with DispatcherClient(running.target, timeout=120) as client:
            for _ in range(decisions + 1):
                before = sum(t.seconds for t in timers)
                started = time.perf_counter()
                client.dispatch(request, timeout=120)
                walls.append(time.perf_counter() - started)
                spent.append(sum(t.seconds for t in timers) - before)
                time.sleep(1.1)  # decisions a second apart: each refreshes the index once
    finally:
        running.stop(1.0)
    return (label, walls[0], statistics.median(walls[1:]), statistics.median(spent[1:]),
            spent[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--history", type=int, default=20_000)
    parser.add_argument("--decisions", type=int, default=3)
    parser.add_argument("--postgres", help="URL of a PostgreSQL database to measure too "
                        "(its completions table gets the benchmark's history)")
    args = parser.parse_args()
    saved = structlog.get_config()
    configure_logging("console", "error")
    system = homogeneous(f"h{args.nodes}", args.nodes, {"core": 32, "mem": 131072})
    snapshot = synthetic_snapshot(system, 100, busy=1.0, seed=0)  # a job on every node
    request = snapshot_to_pb(snapshot)
    request.cluster = CLUSTER
    unknown = sum(1 for r in snapshot.running if r.expected_duration is None)
    completions = history(args.history)
    print(f"{args.nodes} nodes, {len(snapshot.running)} running jobs ({unknown} without "
          f"expected_duration), {len(snapshot.queued)} queued, {len(completions)} completions "
          f"in the history; PCP'20, medians of {args.decisions} decisions after the first\n")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        ways: list[tuple[str, str | None, int, Callable[[ClusterHistory], object] | None]] = [
            ("walltime (reference)", None, pb.PREDICTOR_WALLTIME, None),
            ("sqlite, one query per job (before)", str(Path(tmp, "per-job.sqlite")),
             pb.PREDICTOR_DATA_DRIVEN, OneQueryPerJob),
            ("sqlite, batched (now)", str(Path(tmp, "batched.sqlite")),
             pb.PREDICTOR_DATA_DRIVEN, None),
        ]
        if args.postgres:
            ways.append(("postgresql, batched (now)", args.postgres, pb.PREDICTOR_DATA_DRIVEN,
                         None))
        for label, store, kind, factory in ways:
            rows.append(measure(label, store, kind, factory, request, completions,
                                args.decisions))
    structlog.configure(**saved)
    print("| predictor | decision s | predictor s | predictor share | first decision s "
          "| first predictor s (index load) |")
    print("|---|---|---|---|---|---|")
    for label, first, wall, spent, first_spent in rows:
        print(f"| {label} | {wall:.3f} | {spent:.4f} | {spent / wall:.1%} | {first:.3f} "
              f"| {first_spent:.3f} |")
    batched = [r for r in rows if "batched" in r[0]]
    worst = max(r[3] / r[2] for r in batched)
    verdict = "met" if worst < TARGET_SHARE else "MISSED"
    print(f"\ntarget: predictor < {TARGET_SHARE:.0%} of the decision (batched): worst "
          f"{worst:.1%} -> {verdict}")


if __name__ == "__main__":
    main()
