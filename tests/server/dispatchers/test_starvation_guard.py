"""The starvation guard: the oldest job, once it has waited long enough, is EASY's head."""

from __future__ import annotations

import dataclasses

import pytest

from hpcdispatch.decision_check import check_decision
from hpcdispatch.server.dispatchers.planning.job_selection import select_for_model
from hpcdispatch.server.dispatchers.planning.starvation_guard import guarded_job
from hpcdispatch.snapshot import Snapshot
from tests.instances import FAST, T, decide, node, problem_of, queued, running, started

GUARDED = ["hcp19", "pcp20"]  # the models that can hold a reservation


def _long_old_job_and_short_ones() -> Snapshot:
    # One free node (n2). "long" (oldest, 10,000 s) and two short jobs fit it, one at a time.
    # Minimising total slowdown starts a short job first (postponing "long" by 50 s costs
    # 0.005 of slowdown; postponing a short job by 10,000 s costs 200): "long" waits, and a
    # stream of short jobs keeps it waiting.
    return Snapshot(
        T, (node(1), node(2)), (running("r", "n1", 4, 5_000),),
        (queued("long", 4, 10_000, submit=T - 7_200), queued("s1", 4, 50, submit=T - 60),
         queued("s2", 4, 50, submit=T - 30)),
    )


@pytest.mark.parametrize("name", GUARDED)
def test_an_overdue_old_job_that_fits_starts_now(name: str) -> None:
    snap = _long_old_job_and_short_ones()
    _, plain = decide(name, snap, FAST)
    assert started(plain) == {"s1"}  # the papers' objective: the old long job waits
    outcome, guarded = decide(name, snap, dataclasses.replace(FAST, starvation_wait_s=3_600))
    assert started(guarded) == {"long"}
    assert check_decision(snap, guarded) == []
    assert outcome.considered[0] == 0  # the guarded job leads the model
    # Below the bound the objective alone decides.
    _, young = decide(name, snap, dataclasses.replace(FAST, starvation_wait_s=7_201))
    assert started(young) == {"s1"}


@pytest.mark.parametrize("name", GUARDED)
def test_an_overdue_wide_job_gets_the_reservation_without_protect_head(name: str) -> None:
    # n1 busy until T+100, n2 free. "wide" (oldest, 2 nodes) cannot start now; "long" would
    # hold n2 past T+100 and delay it. Without protection "long" starts and "wide" waits
    # behind it; once "wide" is overdue it holds EASY's reservation: only "short" may start.
    snap = Snapshot(
        T, (node(1), node(2)), (running("r", "n1", 4, 100),),
        (queued("wide", 4, 500, submit=T - 7_200, units=2),
         queued("long", 2, 5_000, submit=T - 20), queued("short", 2, 50, submit=T - 10)),
    )
    assert not FAST.protect_head
    _, unguarded = decide(name, snap, FAST)
    assert started(unguarded) == {"long", "short"}
    _, guarded = decide(name, snap, dataclasses.replace(FAST, starvation_wait_s=3_600))
    assert started(guarded) == {"short"}
    assert check_decision(snap, guarded) == []


def test_the_guarded_job_is_the_oldest_one_past_the_bound() -> None:
    snap = _long_old_job_and_short_ones()
    problem = problem_of(snap)
    selection = select_for_model(problem, 100)
    assert guarded_job(problem, selection, 0) is None  # off
    assert guarded_job(problem, selection, 7_201) is None  # nobody has waited that long
    guard = guarded_job(problem, selection, 7_200)
    assert guard is not None and guard.job.id == "long" and guard.fits_now


def test_a_job_that_never_fits_is_not_guarded() -> None:
    snap = Snapshot(
        T, (node(1), node(2)), (),
        (queued("huge", 4, 100, submit=T - 9_000, units=3), queued("ok", 4, 100, submit=T - 10)),
    )
    problem = problem_of(snap)
    assert guarded_job(problem, select_for_model(problem, 100), 3_600) is None
