"""Small hand-made dispatching instances for tests."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from hpcdispatch.catalog import DISPATCHER_NAMES
from hpcdispatch.server.dispatchers import DISPATCHERS
from hpcdispatch.server.dispatchers.base import Outcome, SearchControl, SearchSettings
from hpcdispatch.server.dispatchers.fcfs import FcfsDispatcher
from hpcdispatch.server.dispatchers.planning.problem import Problem, build_problem
from hpcdispatch.server.domain.outcome_kinds import SolveStatus
from hpcdispatch.server.pipeline import predict_durations, run_decision
from hpcdispatch.server.predictors.walltime import WalltimePredictor
from hpcdispatch.snapshot import (
    Decision,
    Node,
    NodeState,
    QueuedJob,
    RunningJob,
    Snapshot,
    UnitAllocation,
)
from hpcdispatch.v1 import dispatcher_pb2 as pb

T = 1000
FAST = SearchSettings("test", delta_ms=200, delta_max_ms=800, k=1, window=100)
# The retired `fast` profile's settings (the default until issue #13), spelled out for the
# tests whose figures were measured with them: the quick search and EASY's head reservation.
FAST_WITH_HEAD = SearchSettings("fast", delta_ms=100, delta_max_ms=800, k=1, window=100,
                                stall_ms=10, protect_head=True)


def node(i: int, cores: int = 4, state: NodeState = NodeState.UP, **extra: int) -> Node:
    return Node(f"n{i}", state, {"core": cores, **extra})


def running(job_id: str, node_id: str, cores: int, ends_in: int, **extra: int) -> RunningJob:
    return RunningJob(
        id=job_id, user="u", name="r", start_time=T - 10, requested_time=10 + ends_in,
        expected_duration=10 + ends_in,
        units=(UnitAllocation(node_id, {"core": cores, **extra}),),
    )


def queued(
    job_id: str, cores: int, duration: int, submit: int = T - 100, units: int = 1, **extra: int
) -> QueuedJob:
    return QueuedJob(
        id=job_id, user="u", name="q", queue="batch", submit_time=submit, units=units,
        unit_request={"core": cores, **extra}, requested_time=duration,
    )


def problem_of(snapshot: Snapshot) -> Problem:
    """The problem the pipeline builds for `snapshot` with requested times as durations."""
    durations = predict_durations(snapshot, WalltimePredictor())
    return build_problem(snapshot, durations.queued, durations.running)


def decide(
    name: str, snapshot: Snapshot, settings: SearchSettings = FAST, allow_fallback: bool = False
) -> tuple[Outcome, Decision]:
    """Decide through the service's own pipeline (durations = requested times, unless the
    caller gave them; the independent check; the fallback). A fallback means the dispatcher's
    own decision was wrong: an error unless `allow_fallback`."""
    result = run_decision(
        snapshot, DISPATCHER_NAMES[name], WalltimePredictor(),
        SearchControl(settings, time.monotonic() + 30),
    )
    assert allow_fallback or not result.fallback_reason, result.fallback_reason
    return result.outcome, result.decision


def started(decision: Decision) -> set[str]:
    return {s.job_id for s in decision.starts}


class OverAllocating:
    """A broken dispatcher standing in for FCFS: every queued job on node 0, far beyond it."""

    name = "broken"
    kind = pb.DISPATCHER_FCFS

    def decide(self, problem: Problem, control: SearchControl) -> Outcome:
        return Outcome(placements={j.index: [0] * j.units for j in problem.jobs},
                       status=SolveStatus.HEURISTIC)


class Crashing:
    """A dispatcher standing in for HCP'19 that raises."""

    name = "crash"
    kind = pb.DISPATCHER_HCP19

    def decide(self, problem: Problem, control: SearchControl) -> Outcome:
        raise RuntimeError("boom")


class Held:
    """A dispatcher standing in for `kind` (FCFS unless told) whose decisions wait until the
    test releases them: a slow decision without sleeps, in progress for as long as a test
    needs however busy the machine. `entered` is set once a decision is being made (for a
    session call: once its delta is applied); `release` lets every decision go on (or, for a
    server in another process, `release_file` coming into existence), and a decision whose
    caller has gone (cancelled, or past its deadline) goes on by itself, as a real search
    stops. Each decision is then `decides_as`'s (FCFS unless told)."""

    name = "held"

    def __init__(self, kind: int = pb.DISPATCHER_FCFS, decides_as: int = pb.DISPATCHER_FCFS,
                 release_file: Path | None = None, hold_at_most: float = 300.0) -> None:
        self.kind, self.decides_as = kind, decides_as
        self.entered = threading.Event()
        self.release = threading.Event()
        self.release_file = release_file
        self.hold_at_most = hold_at_most  # a forgotten release ends the test, not the suite
        self.calls = 0  # decisions begun

    def decide(self, problem: Problem, control: SearchControl) -> Outcome:
        self.calls += 1
        self.entered.set()
        give_up = time.monotonic() + self.hold_at_most
        while not self.release.wait(0.01) and not control.cancelled() and not (
            self.release_file is not None and self.release_file.exists()
        ) and time.monotonic() < give_up:
            pass
        if self.decides_as == pb.DISPATCHER_FCFS:
            return FcfsDispatcher().decide(problem, control)
        return DISPATCHERS[self.decides_as].decide(problem, control)
