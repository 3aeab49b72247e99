"""Random valid snapshots: every dispatcher's decision passes the independent check."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcdispatch.catalog import DISPATCHER_NAMES
from hpcdispatch.decision_check import check_decision
from hpcdispatch.server.dispatchers.base import Outcome, SearchSettings
from hpcdispatch.snapshot import (
    Decision,
    Node,
    NodeState,
    QueuedJob,
    RunningJob,
    Snapshot,
    UnitAllocation,
)
from tests.instances import T, decide

QUICK = SearchSettings("test", delta_ms=20, delta_max_ms=40, k=1, window=20)
PROTECTED = SearchSettings("test", delta_ms=20, delta_max_ms=40, k=1, window=20,
                           protect_head=True)
TYPES = ("core", "mem", "gpu")


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    node_count = draw(st.integers(1, 8))
    nodes = []
    for i in range(node_count):
        cap = {"core": draw(st.integers(1, 16)), "mem": draw(st.integers(1, 64))}
        if draw(st.booleans()):
            cap["gpu"] = draw(st.integers(1, 4))
        state = draw(st.sampled_from([NodeState.UP] * 4 + [NodeState.DOWN, NodeState.DRAINED]))
        nodes.append(Node(f"n{i}", state, cap))
    free = {n.id: dict(n.capacity) for n in nodes}
    running = []
    for j in range(draw(st.integers(0, 10))):
        n = draw(st.sampled_from(nodes))
        amounts = {r: draw(st.integers(0, free[n.id][r])) for r in n.capacity}
        for r, a in amounts.items():
            free[n.id][r] -= a
        start = T - draw(st.integers(0, 500))
        running.append(RunningJob(
            id=f"r{j}", user=f"u{j % 3}", name="x", start_time=start,
            requested_time=draw(st.integers(1, 1000)),
            expected_duration=draw(st.one_of(st.none(), st.integers(1, 1000))),
            units=(UnitAllocation(n.id, amounts),),
        ))
    present = {r for n in nodes for r in n.capacity}
    queued = []
    for j in range(draw(st.integers(0, 15))):
        req = {"core": draw(st.integers(1, 16))}
        for r in ("mem", "gpu"):
            if r in present and draw(st.booleans()):
                req[r] = draw(st.integers(1, 8))
        queued.append(QueuedJob(
            id=f"q{j}", user=f"u{j % 3}", name="x", queue="q",
            submit_time=T - draw(st.integers(0, 1000)), units=draw(st.integers(1, 4)),
            unit_request=req, requested_time=draw(st.integers(1, 5000)),
        ))
    return Snapshot(T, tuple(nodes), tuple(running), tuple(queued))


@pytest.mark.parametrize(
    ("name", "search"),
    [(n, QUICK) for n in sorted(DISPATCHER_NAMES)]
    + [("hcp19", PROTECTED), ("pcp20", PROTECTED)],
)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot=snapshots())
def test_every_decision_passes_the_independent_check(
    name: str, search: SearchSettings, snapshot: Snapshot
) -> None:
    outcome, decision = decide(name, snapshot, search)
    assert_checked_and_accounted(snapshot, outcome, decision)


def assert_checked_and_accounted(snapshot: Snapshot, outcome: Outcome, decision: Decision) -> None:
    """The decision passes the independent check, and every queued job is either considered or
    skipped, never both."""
    assert check_decision(snapshot, decision) == []
    queued_ids = {q.id for q in snapshot.queued}
    considered = {snapshot.queued[i].id for i in outcome.considered}
    skipped = {snapshot.queued[i].id for i, _ in outcome.skipped}
    assert considered | skipped == queued_ids  # every queued job is accounted for
    assert not considered & skipped


def test_the_check_catches_what_it_must() -> None:
    """The checker itself: over-allocation, wrong unit count, unknown / down nodes, repeats."""
    from hpcdispatch.snapshot import Decision, JobStart
    from tests.instances import node, queued, running

    snap = Snapshot(
        T, (node(1), node(2, state=NodeState.DOWN)), (running("r", "n1", 2, 100),),
        (queued("a", 2, 10, units=2), queued("b", 1, 10)),
    )
    cases = {
        "over capacity": [JobStart("a", ("n1", "n1"))],
        "were placed": [JobStart("a", ("n1",))],
        "unknown node": [JobStart("b", ("n9",))],
        "down node": [JobStart("b", ("n2",))],
        "started twice": [JobStart("b", ("n1",)), JobStart("b", ("n1",))],
        "not a queued job": [JobStart("r", ("n1",))],
    }
    for expected, starts in cases.items():
        problems = check_decision(snap, Decision(T, starts))
        assert any(expected in p for p in problems), (expected, problems)
    assert check_decision(snap, Decision(T, [JobStart("b", ("n1",), 5)])) == []
