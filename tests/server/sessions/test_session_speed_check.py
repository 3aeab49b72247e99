"""What the faster session decision keeps: the array check's verdicts, the kept queued
durations, the bulk-built answer (against straightforward versions of each)."""

from __future__ import annotations

import dataclasses
import random
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence

import grpc
import pytest

from hpcdispatch.decision_check import check_decision, check_decision_against
from hpcdispatch.proto_convert import add_starts, decision_from_pb, snapshot_to_pb
from hpcdispatch.server.config import load_config
from hpcdispatch.server.dispatchers import DISPATCHERS
from hpcdispatch.server.dispatchers.base import SearchControl
from hpcdispatch.server.domain.duration_predictor import JobFacts
from hpcdispatch.server.pipeline import FALLBACK_CHECK_FAILED, predict_durations, run_decision
from hpcdispatch.server.predictors.walltime import WalltimePredictor
from hpcdispatch.server.rpc.app import RunningServer, start_server
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
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import homogeneous
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc
from tests.instances import FAST, OverAllocating
from tests.server.sessions.test_session_running import PREDICTORS, HalfPredictor, World


def reference_check(snapshot: Snapshot, decision: Decision) -> list[str]:
    """The check as plain per-unit dictionary sums (what the array check must agree with)."""
    problems: list[str] = []
    nodes = {n.id: n for n in snapshot.nodes}
    queued = {q.id: q for q in snapshot.queued}
    touched = {n for start in decision.starts for n in start.nodes if n in nodes}
    used: dict[str, Counter[str]] = {n: Counter() for n in touched}
    for job in snapshot.running:
        for unit in job.units:
            if unit.node_id in used:
                used[unit.node_id].update(unit.amounts)
    seen: set[str] = set()
    for start in decision.starts:
        job = queued.get(start.job_id)
        if job is None:
            problems.append(f"job {start.job_id!r} is not a queued job of the snapshot")
            continue
        if start.job_id in seen:
            problems.append(f"job {start.job_id!r} is started twice")
            continue
        seen.add(start.job_id)
        if len(start.nodes) != job.units:
            problems.append(f"job {job.id!r} asks for {job.units} units but "
                            f"{len(start.nodes)} were placed")
        for node_id in start.nodes:
            node = nodes.get(node_id)
            if node is None:
                problems.append(f"job {job.id!r} placed on unknown node {node_id!r}")
                continue
            if node.state is not NodeState.UP:
                problems.append(f"job {job.id!r} placed on {node.state.value} node {node_id!r}")
            used[node_id].update(job.unit_request)
    for node_id, total in used.items():
        capacity = nodes[node_id].capacity
        for resource, amount in total.items():
            if amount > capacity.get(resource, 0):
                problems.append(f"node {node_id!r} over capacity on {resource!r}: "
                                f"{amount} > {capacity.get(resource, 0)}")
    return problems


def random_decision(rng: random.Random, snapshot: Snapshot, valid_ids: bool) -> Decision:
    """Starts of queued jobs (and, unless `valid_ids`, of unknown jobs and nodes), often over
    capacity, on down nodes, with the wrong number of units, repeated."""
    node_ids = [n.id for n in snapshot.nodes] + ([] if valid_ids else ["ghost"])
    queued = list(snapshot.queued)
    job_ids = [q.id for q in queued] + ([] if valid_ids else ["nobody"])
    starts = []
    for _ in range(rng.randint(0, 6)):
        job_id = rng.choice(job_ids) if job_ids else "nobody"
        job = next((q for q in queued if q.id == job_id), None)
        units = job.units if job is not None and rng.random() < 0.8 else rng.randint(1, 3)
        starts.append(JobStart(job_id, tuple(rng.choice(node_ids) for _ in range(units)), 1))
    return Decision(snapshot.time, starts)


@pytest.mark.parametrize("seed", range(25))
def test_the_array_check_agrees_with_plain_sums_over_a_long_session(seed: int) -> None:
    """Checked at every step of a session (its node table kept across node changes, new
    nodes and resource types, jobs starting and ending), a random decision gets the verdict
    of plain per-unit sums, from the session's facts and from the snapshot's, in one order."""
    rng = random.Random(seed)
    world = World(rng)
    state = world.state
    for _ in range(30):
        world.step()
        snapshot = state.snapshot(pb.PREDICTOR_WALLTIME, PREDICTORS[pb.PREDICTOR_WALLTIME])
        for _ in range(3):
            decision = random_decision(rng, snapshot, valid_ids=rng.random() < 0.5)
            mine = check_decision_against(state, decision)
            assert mine == check_decision(snapshot, decision)
            assert sorted(mine) == sorted(reference_check(snapshot, decision))


def test_a_hand_made_decision_over_capacity_fails_the_session_check() -> None:
    node = Node("n1", NodeState.UP, {"core": 8, "mem": 1024})
    held = RunningJob("r", "u", "", 0, 100, None, (UnitAllocation("n1", {"core": 4}),))
    jobs = tuple(QueuedJob(j, "u", "", "", 0, 1, {"core": 3}, 100) for j in ("a", "b"))
    state = SessionState("c", Snapshot(10, (node,), (held,), jobs))
    fits = Decision(10, [JobStart("a", ("n1",), 5)])
    assert check_decision_against(state, fits) == []
    over = Decision(10, [JobStart("a", ("n1",), 5), JobStart("b", ("n1",), 5)])
    assert check_decision_against(state, over) == ["node 'n1' over capacity on 'core': 10 > 8"]
    state.end(["r"])  # what the ended job held is free again
    assert check_decision_against(state, over) == []
    state.set_node("n1", NodeState.DRAINED, None)
    assert check_decision_against(state, fits) == ["job 'a' placed on drained node 'n1'"]
    state.set_node("n1", NodeState.UP, {"core": 2})
    assert check_decision_against(state, fits) == ["node 'n1' over capacity on 'core': 3 > 2"]
    state.set_node("n2", NodeState.UP, {"core": 4, "gpu": 1})  # a new node, a new type
    state.submit([QueuedJob("g", "u", "", "", 0, 2, {"gpu": 1}, 100),
                  QueuedJob("h", "u", "", "", 0, 1, {"gpu": 1}, 100)])
    gpus = Decision(10, [JobStart("g", ("n2", "n2"), 5), JobStart("h", ("n1",), 5)])
    assert check_decision_against(state, gpus) == [
        "node 'n2' over capacity on 'gpu': 2 > 1", "node 'n1' over capacity on 'gpu': 1 > 0"]
    state.submit([QueuedJob("x", "u", "", "", 0, 1, {"fpga": 1}, 100)])
    assert check_decision_against(state, Decision(10, [JobStart("x", ("n2",), 5)])) == [
        "node 'n2' over capacity on 'fpga': 1 > 0"]


def test_a_session_decision_that_fails_the_check_falls_back() -> None:
    system = homogeneous("h8", 8, {"core": 32, "mem": 131072})
    snapshot = synthetic_snapshot(system, 30, 0.6, seed=3)
    state = SessionState("c", snapshot)
    predictor = WalltimePredictor()
    view = state.snapshot(pb.PREDICTOR_WALLTIME, predictor)
    result = run_decision(
        view, pb.DISPATCHER_FCFS, predictor,
        SearchControl(FAST, time.monotonic() + 30), state.node_index(),
        dispatchers={**DISPATCHERS, pb.DISPATCHER_FCFS: OverAllocating()},
        occupancy=state.occupancy(pb.PREDICTOR_WALLTIME, predictor), facts=state,
        queued_durations=lambda: state.queued_durations(pb.PREDICTOR_WALLTIME, predictor))
    assert result.fallback_code == FALLBACK_CHECK_FAILED
    assert "over capacity" in result.fallback_reason
    assert result.check_failures == [pb.DISPATCHER_FCFS]
    assert result.decision.starts and check_decision(snapshot, result.decision) == []


@pytest.fixture
def server() -> Iterator[RunningServer]:
    config = dataclasses.replace(load_config(env={}), listen="127.0.0.1:0", workers=4)
    running = start_server(config)
    yield running
    running.stop(grace=1.0)


def test_an_over_allocating_dispatcher_is_caught_through_a_session(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(DISPATCHERS, pb.DISPATCHER_FCFS, OverAllocating())
    system = homogeneous("h8", 8, {"core": 32, "mem": 131072})
    snapshot = synthetic_snapshot(system, 30, 0.6, seed=4)
    request = snapshot_to_pb(snapshot)
    request.dispatcher = pb.DISPATCHER_FCFS
    request.predictor = pb.PREDICTOR_WALLTIME
    with grpc.insecure_channel(server.target) as channel:
        stub = pb_grpc.SessionServiceStub(channel)
        opened = stub.OpenSession(pb.OpenSessionRequest(snapshot=request, decide=True),
                                  timeout=30)
        first = opened.decision
        assert first.report.fallback_reason.startswith("decision failed the check")
        assert first.starts and check_decision(snapshot, decision_from_pb(first)) == []
        again = stub.UpdateSession(pb.UpdateSessionRequest(
            session_id=opened.session_id, sequence=1, time=snapshot.time + 1,
            dispatcher=pb.DISPATCHER_FCFS, predictor=pb.PREDICTOR_WALLTIME, decide=True),
            timeout=30).decision
        assert again.report.fallback_reason.startswith("decision failed the check")
        later = dataclasses.replace(snapshot, time=snapshot.time + 1)
        assert check_decision(later, decision_from_pb(again)) == []


class LearningPredictor(HalfPredictor):
    """Half the requested time, then a third once it has 'learned' (no job_only)."""

    def __init__(self) -> None:
        self.learned = False

    def predict(self, job: JobFacts) -> int:
        return max(1, job.requested_time // (3 if self.learned else 2))


@pytest.mark.parametrize("seed", range(10))
def test_kept_queued_durations_are_the_pipelines(seed: int) -> None:
    """Across submits, cancels, starts, a predictor that learns and one replaced, the
    session's queued durations are what predict_durations predicts for its snapshot."""
    rng = random.Random(seed)
    world = World(rng)
    state = world.state
    walltime, learning = WalltimePredictor(), LearningPredictor()
    for step in range(25):
        world.step()
        if rng.random() < 0.3 and state.queued:  # a queued job replaced under its id
            old = state.queued[rng.choice(sorted(state.queued))]
            state.cancel([old.id])
            state.submit([dataclasses.replace(old, requested_time=old.requested_time + 7)])
        if step == 12:
            learning.learned = True
            walltime = WalltimePredictor()
        for kind, predictor in ((pb.PREDICTOR_WALLTIME, walltime),
                                (pb.PREDICTOR_LAST_TWO, learning)):
            snapshot = state.snapshot(kind, predictor)
            kept = state.queued_durations(kind, predictor)
            expected = predict_durations(snapshot, predictor).queued
            assert list(kept.items()) == list(expected.items())


def unit_by_unit(starts: Sequence[JobStart],
                 requests: Mapping[str, Mapping[str, int]]) -> pb.DispatchResponse:
    response = pb.DispatchResponse()
    for start in starts:
        placed = response.starts.add(job_id=start.job_id,
                                     expected_duration=start.expected_duration)
        for node_id in start.nodes:
            placed.units.add(node_id=node_id, amounts=requests[start.job_id])
    return response


@pytest.mark.parametrize("seed", range(10))
def test_starts_built_in_bulk_equal_unit_by_unit(seed: int) -> None:
    rng = random.Random(seed)
    types = ["core", "mem", "gpu", "license-x"]
    requests = {
        f"j{i}": {r: rng.choice([0, 1, 7, 2**40]) for r in rng.sample(types, rng.randint(0, 4))}
        for i in range(40)
    }
    starts = [
        JobStart(job_id, tuple(rng.choice(["n1", "n2", "ü-3", "x" * 200])
                               for _ in range(rng.randint(1, 9))), rng.randint(0, 2**31))
        for job_id in rng.sample(sorted(requests), 25)
    ]
    response = pb.DispatchResponse()
    add_starts(response, starts, requests)
    assert response == unit_by_unit(starts, requests)
    assert decision_from_pb(response).starts == starts
