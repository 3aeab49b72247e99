"""Work conservation: a queued job that fits on idle resources now, around the reservation,
starts now, whatever the plan holds for later."""

from __future__ import annotations

import dataclasses

import pytest

from hpcdispatch.catalog import CP_DISPATCHER_NAMES
from hpcdispatch.decision_check import check_decision
from hpcdispatch.server.domain.profiles import DEFAULT_PROFILE, PROFILES
from hpcdispatch.snapshot import Snapshot
from tests.instances import FAST, FAST_WITH_HEAD, T, decide, node, queued, running, started

CP = list(CP_DISPATCHER_NAMES)
CONSERVING = dataclasses.replace(FAST, work_conserving=True)


def _plan_holds_idle_nodes() -> Snapshot:
    # Eight idle one-core nodes. The optimum of total slowdown starts "six" (6 nodes, 100 s)
    # now, "eight" (all 8 nodes, 10,000 s) when it ends, and "two" (2 nodes, 50,000 s) after
    # that (+0.2 of slowdown; now, it would delay "eight" by 49,900 s: +4.99). So the plan
    # leaves two nodes idle for 100 s while "two" would fit on them.
    return Snapshot(
        T, tuple(node(i, cores=1) for i in range(8)), (),
        (queued("six", 1, 100, submit=T - 30, units=6),
         queued("eight", 1, 10_000, submit=T - 20, units=8),
         queued("two", 1, 50_000, submit=T - 10, units=2)),
    )


@pytest.mark.parametrize("name", ["hcp19", "pcp20"])
def test_a_long_queue_does_not_leave_idle_nodes(name: str) -> None:
    # 150 one-node jobs on 200 idle nodes: all fit, but only the window's m = 100 enter the
    # model. The old default starts those and leaves 100 nodes idle; the new one starts all.
    snap = Snapshot(
        T, tuple(node(i, cores=1) for i in range(200)), (),
        tuple(queued(f"j{i}", 1, 100 + i, submit=T - 1_000 + i) for i in range(150)),
    )
    _, old = decide(name, snap, FAST_WITH_HEAD)
    assert len(old.starts) == 100
    _, new = decide(name, snap, PROFILES[DEFAULT_PROFILE][0])
    assert len(new.starts) == 150
    assert check_decision(snap, new) == []


@pytest.mark.parametrize("name", CP)
def test_a_planned_start_is_not_delayed(name: str) -> None:
    # "two" fits on the two idle nodes, but started now it would delay the start the plan
    # holds for "eight": it is a job of the model, and the pass leaves the plan alone.
    snap = _plan_holds_idle_nodes()
    _, decision = decide(name, snap, CONSERVING)
    assert started(decision) == {"six"}


@pytest.mark.parametrize("name", CP)
def test_jobs_outside_the_window_start_when_they_fit(name: str) -> None:
    # Window m = 1: only the highest-priority job enters the model; the others fit too.
    snap = Snapshot(
        T, tuple(node(i) for i in range(3)), (),
        tuple(queued(f"j{i}", 4, 100 + i, submit=T - 10 * i) for i in range(3)),
    )
    _, windowed = decide(name, snap, dataclasses.replace(FAST, window=1))
    assert len(started(windowed)) == 1
    outcome, conserving = decide(name, snap, dataclasses.replace(CONSERVING, window=1))
    assert started(conserving) == {"j0", "j1", "j2"}
    assert check_decision(snap, conserving) == []
    assert outcome.skipped == []  # started jobs are no longer reported as outside the window


@pytest.mark.parametrize("name", ["hcp19", "pcp20"])
def test_work_conservation_leaves_the_head_reservation_alone(name: str) -> None:
    # n1 busy until T+100, n2 free. "wide" (oldest) needs both nodes and holds the
    # reservation at T+100; "long" would hold n2 past it: it must not start, "short" may.
    snap = Snapshot(
        T, (node(1), node(2)), (running("r", "n1", 4, 100),),
        (queued("wide", 4, 500, submit=T - 300, units=2), queued("long", 2, 5_000, submit=T - 20),
         queued("short", 2, 50, submit=T - 10)),
    )
    _, decision = decide(name, snap, dataclasses.replace(CONSERVING, protect_head=True))
    assert started(decision) == {"short"}
    assert check_decision(snap, decision) == []
