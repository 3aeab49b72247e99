"""A session's incremental running work against the full-snapshot computation.

After every delta of random sequences (jobs end, start on one or several nodes, are submitted
or cancelled; nodes go down, come back, change capacity, appear, bring a new resource type;
time passes so predictions are outlived), the session's Occupancy must equal
`occupancy_from_snapshot` of the session's own snapshot (rows, ends, free vectors, groups in the
same order), the Problem built from either must be the same, every dispatcher without a solver
must decide the same, and the independent check must read the same facts from the session as
from the snapshot.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections import Counter
from collections.abc import Sequence

import numpy as np
import pytest

from hpcdispatch.decision_check import SnapshotFacts, check_decision, check_decision_against
from hpcdispatch.server.dispatchers.base import SearchControl
from hpcdispatch.server.dispatchers.planning.problem import Problem, build_problem
from hpcdispatch.server.domain.duration_predictor import JobFacts
from hpcdispatch.server.domain.free_pool import FreePool
from hpcdispatch.server.domain.node_index import index_nodes
from hpcdispatch.server.domain.occupancy import Occupancy, occupancy_from_snapshot
from hpcdispatch.server.pipeline import (
    corrected_duration,
    predict_durations,
    run_decision,
    running_facts,
)
from hpcdispatch.server.predictors.walltime import WalltimePredictor
from hpcdispatch.server.sessions.state import SessionState
from hpcdispatch.snapshot import (
    Decision,
    JobStart,
    Node,
    NodeState,
    QueuedJob,
    RunningJob,
    Snapshot,
    UnitAllocation,
)
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.instances import FAST

# Dispatchers that decide without a solver: deterministic, so both paths must agree exactly.
HEURISTICS = (pb.DISPATCHER_EASY, pb.DISPATCHER_FCFS, pb.DISPATCHER_CONSERVATIVE,
              pb.DISPATCHER_EASY_SJF)


class HalfPredictor:
    """Half the requested time: running jobs outlive it, so durations get corrected."""

    name = "half"

    def predict(self, job: JobFacts) -> int:
        return max(1, job.requested_time // 2)

    def predict_many(self, jobs: Sequence[JobFacts]) -> list[int]:
        return [self.predict(j) for j in jobs]


PREDICTORS = {pb.PREDICTOR_WALLTIME: WalltimePredictor(), pb.PREDICTOR_LAST_TWO: HalfPredictor()}


class World:
    """A random cluster and the deltas applied to a session of it."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.t = 10_000
        self.serial = 0
        nodes = [self._node(f"n{i}") for i in range(rng.randint(3, 12))]
        self.state = SessionState("c", Snapshot(self.t, tuple(nodes), (), ()))
        for _ in range(rng.randint(0, 8)):
            self.start_one()
        for _ in range(rng.randint(0, 6)):
            self.submit_one()

    def _node(self, node_id: str, types: Sequence[str] = ("core", "mem")) -> Node:
        rng = self.rng
        capacity = {r: rng.choice([4, 8, 16]) * (1 if r == "core" else 1024) for r in types}
        state = NodeState.UP if rng.random() < 0.85 else rng.choice(
            [NodeState.DOWN, NodeState.DRAINED])
        return Node(node_id, state, capacity)

    def free(self, node: Node) -> dict[str, int]:
        held = self.state.used.get(node.id, {})
        return {r: c - held.get(r, 0) for r, c in node.capacity.items()}

    def start_one(self) -> None:
        """A running job on 1..3 nodes (several units on one node sometimes)."""
        rng = self.rng
        state = self.state
        hosts = [n for n in state.nodes if any(v > 0 for v in self.free(n).values())]
        if not hosts:
            return
        units: list[UnitAllocation] = []
        taken: Counter[tuple[str, str]] = Counter()
        for node in rng.sample(hosts, min(len(hosts), rng.randint(1, 3))):
            for _ in range(rng.choice([1, 1, 2])):
                left = {r: v - taken[node.id, r] for r, v in self.free(node).items()}
                amounts = {r: rng.randint(0, v // 2) for r, v in left.items() if v > 0}
                if not any(amounts.values()):
                    continue
                units.append(UnitAllocation(node.id, amounts))
                for r, v in amounts.items():
                    taken[node.id, r] += v
        if not units:
            return
        self.serial += 1
        requested = rng.choice([60, 600, 3600])
        job = RunningJob(
            id=f"r{self.serial}", user="u", name="a", start_time=self.t - rng.randint(0, 900),
            requested_time=requested,
            expected_duration=rng.choice([None, None, rng.randint(1, requested)]),
            units=tuple(units),
        )
        state.start([job])

    def submit_one(self) -> None:
        rng = self.rng
        self.serial += 1
        types = sorted({r for n in self.state.nodes for r in n.capacity})
        request = {r: rng.randint(1, 4) * (1 if r == "core" else 512)
                   for r in rng.sample(types, rng.randint(1, len(types)))}
        self.state.submit([QueuedJob(
            id=f"q{self.serial}", user="u", name="a", queue="b",
            submit_time=self.t - rng.randint(0, 600), units=rng.randint(1, 3),
            unit_request=request, requested_time=rng.choice([60, 600, 3600]),
        )])

    def change_node(self) -> None:
        rng = self.rng
        state = self.state
        roll = rng.random()
        if roll < 0.2:
            types = sorted({r for n in state.nodes for r in n.capacity})
            if rng.random() < 0.3:
                types.append("gpu")
            new = self._node(f"n{len(state.nodes)}-{self.serial}", types)
            state.set_node(new.id, new.state, new.capacity)
            return
        node = rng.choice(state.nodes)
        new_state = rng.choice([NodeState.UP, NodeState.UP, NodeState.DOWN, NodeState.DRAINED])
        capacity = None
        if roll < 0.5:  # more of every type it has (never below what is held)
            capacity = {r: c + rng.choice([0, 4, 1024]) for r, c in node.capacity.items()}
        state.set_node(node.id, new_state, capacity)

    def step(self) -> None:
        """One random delta, applied in the order the service applies one."""
        rng = self.rng
        state = self.state
        for _ in range(rng.choice([0, 0, 1])):
            self.change_node()
        if state.running and rng.random() < 0.6:
            state.end(rng.sample(sorted(state.running), rng.randint(1, min(3, len(state.running)))))
        if state.queued and rng.random() < 0.3:
            state.cancel([rng.choice(sorted(state.queued))])
        for _ in range(rng.randint(0, 2)):
            self.submit_one()
        for _ in range(rng.randint(0, 3)):
            self.start_one()
        self.t += rng.choice([0, 1, 30, 400])
        state.time = self.t


def full_occupancy(snapshot: Snapshot, kind: int) -> tuple[Occupancy, dict[str, int]]:
    durations = predict_durations(snapshot, PREDICTORS[kind])
    return occupancy_from_snapshot(snapshot, durations.running, index_nodes(snapshot.nodes)), \
        durations.queued


def assert_same_pool(mine: FreePool, full: FreePool) -> None:
    assert mine.free == full.free
    assert list(mine.eligible) == list(full.eligible)
    assert mine.scale == full.scale
    assert list(mine.groups.items()) == list(full.groups.items())  # same groups, same order
    for vec, group in full.groups.items():
        assert mine.first(vec) == min(group)
        assert mine.smallest(vec, 3) == sorted(group)[:3]


def assert_same_occupancy(mine: Occupancy, full: Occupancy) -> None:
    for column in ("nodes", "amounts", "ends", "up"):
        np.testing.assert_array_equal(getattr(mine.running, column),
                                      getattr(full.running, column), err_msg=column)
    assert_same_pool(mine.free_now, full.free_now)


def assert_same_problem(mine: Problem, full: Problem) -> None:
    assert (mine.t, mine.resources, tuple(mine.node_ids), tuple(mine.capacity)) == (
        full.t, full.resources, tuple(full.node_ids), tuple(full.capacity))
    assert tuple(mine.eligible) == tuple(full.eligible)
    assert mine.jobs == full.jobs
    assert mine.up_capacity == full.up_capacity
    assert mine.up_capacity_groups() == full.up_capacity_groups()
    assert mine.pooled_releases() == full.pooled_releases()
    assert mine.pooled_free_now() == full.pooled_free_now()
    assert mine.first_end() == full.first_end()
    assert mine.blocks == full.blocks
    assert_same_pool(mine.free_now, full.free_now)


def control() -> SearchControl:
    return SearchControl(FAST, time.monotonic() + 30)


@pytest.mark.parametrize("seed", range(40))
def test_the_session_keeps_what_a_full_snapshot_computes(seed: int) -> None:
    rng = random.Random(seed)
    world = World(rng)
    state = world.state
    for _ in range(12):
        world.step()
        kind = rng.choice(list(PREDICTORS))
        predictor = PREDICTORS[kind]
        snapshot = state.snapshot(kind, predictor)
        assert [j.id for j in snapshot.running] == list(state.running)
        mine = state.occupancy(kind, predictor)
        full, queued_durations = full_occupancy(snapshot, kind)
        raw = dataclasses.replace(snapshot, running=tuple(state.running.values()))
        assert predict_durations(raw, predictor).running == {  # without the session's cache
            r.id: corrected_duration(
                r.expected_duration if r.expected_duration is not None
                else predictor.predict(running_facts(r)),
                r.start_time, r.requested_time, snapshot.time)
            for r in raw.running
        }
        assert_same_occupancy(mine, full)
        index = state.node_index()
        assert_same_problem(
            build_problem(snapshot, queued_durations, None, index, mine),
            build_problem(snapshot, queued_durations, predict_durations(
                snapshot, predictor).running),
        )
        dispatcher = rng.choice(HEURISTICS)
        by_session = run_decision(snapshot, dispatcher, predictor, control(), index,
                                  occupancy=mine, facts=state)
        by_snapshot = run_decision(snapshot, dispatcher, predictor, control())
        assert by_session.decision == by_snapshot.decision
        assert by_session.outcome.placements == by_snapshot.outcome.placements
        assert by_session.outcome.skipped == by_snapshot.outcome.skipped
        assert not by_session.fallback_reason


@pytest.mark.parametrize("seed", range(20))
def test_the_session_check_reads_the_snapshots_facts(seed: int) -> None:
    """The session's `used` is what its running jobs hold, and a random (often invalid)
    decision gets the same verdict from the session's facts as from the snapshot."""
    rng = random.Random(seed)
    world = World(rng)
    state = world.state
    for _ in range(8):
        world.step()
        snapshot = state.snapshot(pb.PREDICTOR_WALLTIME, PREDICTORS[pb.PREDICTOR_WALLTIME])
        node_ids = [n.id for n in snapshot.nodes] + ["ghost"]
        assert state.held(node_ids) == {
            n: {r: a for r, a in held.items() if a}
            for n, held in SnapshotFacts(snapshot).held(node_ids).items()
        }
        queued_ids = [q.id for q in snapshot.queued] + ["nobody"]
        starts = []
        for _ in range(rng.randint(0, 4)):
            job_id = rng.choice(queued_ids)
            units = rng.randint(1, 3)
            starts.append(JobStart(job_id, tuple(rng.choice(node_ids) for _ in range(units))))
        decision = Decision(snapshot.time, starts)
        assert sorted(check_decision_against(state, decision)) == sorted(
            check_decision(snapshot, decision))
