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
from hpcdispatch.server.domain.free_pool import FreePool, Vec
from hpcdispatch.server.domain.node_index import index_nodes
from hpcdispatch.server.domain.occupancy import Occupancy, occupancy_from_snapshot, running_rows
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


def random_free(rng: random.Random, count: int) -> list[Vec]:
    return [(rng.randint(0, 4), rng.choice([0, 4, 8])) for _ in range(count)]


@pytest.mark.parametrize("seed", range(30))
def test_free_pool_copies_do_not_see_each_others_changes(seed: int) -> None:
    """Copy on write: pools copied from one another, each changed at random, always equal a
    pool built afresh from their own free vectors."""
    rng = random.Random(seed)
    count = rng.randint(1, 40)
    eligible = [rng.random() < 0.9 for _ in range(count)]
    pools = [FreePool(random_free(rng, count), eligible, (4, 8))]
    for _ in range(300):
        pool = rng.choice(pools)
        roll = rng.random()
        if roll < 0.15:
            pools.append(pool.copy() if roll < 0.1 else pool.in_node_order())
        elif roll < 0.5:
            pool.set(rng.randrange(count), random_free(rng, 1)[0])
        elif roll < 0.8:
            req = (rng.randint(0, 2), rng.choice([0, 4]))
            pool.place(req if any(req) else (1, 0), rng.randint(1, 3), rng.random() < 0.3)
        else:
            vec = rng.choice(list(pool.groups)) if pool.groups else None
            if vec is not None:
                pool.smallest(vec, rng.randint(1, 4))
        for each in pools:
            fresh = FreePool(each.free, eligible, (4, 8))
            assert each.groups == fresh.groups
            for vec, group in each.groups.items():
                assert each.first(vec) == min(group)
                assert each.smallest(vec, 2) == sorted(group)[:2]


@pytest.mark.parametrize("seed", range(10))
def test_in_node_order_lists_groups_as_from_array_does(seed: int) -> None:
    rng = random.Random(seed)
    count = rng.randint(1, 50)
    eligible = [rng.random() < 0.9 for _ in range(count)]
    pool = FreePool(random_free(rng, count), eligible, (4, 8))
    for _ in range(40):
        pool.set(rng.randrange(count), random_free(rng, 1)[0])
    ordered = pool.in_node_order()
    fresh = FreePool.from_array(np.asarray(pool.free, dtype=np.int64).reshape(count, 2),
                                eligible, (4, 8))
    assert list(ordered.groups.items()) == list(fresh.groups.items())
    assert ordered.free == fresh.free


@pytest.mark.parametrize("seed", range(20))
def test_running_rows_sum_each_jobs_units_per_node(seed: int) -> None:
    """One row per (job, node), in job order then first-unit order, holding the sum of the
    job's units there; jobs of one unit each take the column-by-column path."""
    rng = random.Random(seed)
    resources = ("core", "gpu", "mem")
    position = {f"n{i}": i for i in range(6)}
    single = rng.random() < 0.5
    jobs = [
        RunningJob(f"r{j}", "u", "a", 0, 10, None, tuple(
            UnitAllocation(rng.choice(list(position)),
                           {r: rng.randint(0, 5) for r in rng.sample(resources, 2)})
            for _ in range(1 if single else rng.randint(1, 4))))
        for j in range(rng.randint(0, 12))
    ]
    expected: list[tuple[int, int, list[int]]] = []  # (job, node, amounts)
    for i, job in enumerate(jobs):
        mine: dict[int, list[int]] = {}
        for unit in job.units:
            row = mine.setdefault(position[unit.node_id], [0] * len(resources))
            for r, name in enumerate(resources):
                row[r] += unit.amounts.get(name, 0)
        expected.extend((i, n, amounts) for n, amounts in mine.items())
    nodes, amounts, owner = running_rows(jobs, position, resources)
    assert [(int(o), int(n), list(a)) for o, n, a in zip(
        owner.tolist(), nodes.tolist(), amounts.tolist(), strict=True)] == expected
