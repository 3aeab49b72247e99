"""Reservations for more of the oldest blocked jobs than the head (`easy_head_depth`): no job a
CP decision starts delays the reservation of an older blocked job, as in EASY-k.

The reservations and the starts are checked together on a fresh profile of the running work
(`NodeProfile`'s arithmetic, not the pass that chose them): at no time does any node hold more
than its capacity."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings

from hpcdispatch.server.dispatchers.planning.job_orders import fcfs
from hpcdispatch.server.dispatchers.planning.job_selection import never_fits
from hpcdispatch.server.dispatchers.planning.later_reservations import (
    Held,
    keep_later_reservations,
)
from hpcdispatch.server.dispatchers.planning.node_profile import NodeProfile
from hpcdispatch.server.dispatchers.planning.oldest_first import oldest_that_fit, with_started
from hpcdispatch.server.dispatchers.planning.problem import Problem
from hpcdispatch.server.dispatchers.planning.reservation import Reservation, reserve
from hpcdispatch.server.dispatchers.planning.stopping import Stopped
from hpcdispatch.snapshot import Decision, Snapshot
from tests.instances import T, decide, node, problem_of, queued, running
from tests.server.dispatchers.cp.test_easy_head import EASY_HEAD, assert_easys_head_promise
from tests.server.dispatchers.test_decision_property import snapshots

DEPTH = 3
EASY_3 = dataclasses.replace(EASY_HEAD, easy_head_depth=DEPTH)


def after_prefix(snapshot: Snapshot) -> tuple[Problem, dict[int, list[int]], Reservation | None]:
    """The problem EASY's prefix leaves, the prefix, and its head's reservation (if any)."""
    problem = problem_of(snapshot)
    prefix = oldest_that_fit(problem, first_fit=False)
    left = with_started(problem, prefix)
    head = next((j for j in fcfs(left) if not never_fits(left, j)), None)
    if head is None:
        return left, prefix, None
    return left, prefix, reserve(left, left.free_now.copy(), head)


def _placements(problem: Problem, decision: Decision, prefix: dict[int, list[int]]
                ) -> dict[int, list[int]]:
    """The decision's starts after the prefix: job index -> node position of each unit."""
    index = {j.id: j.index for j in problem.jobs}
    position = {n: i for i, n in enumerate(problem.node_ids)}
    return {index[s.job_id]: [position[n] for n in s.nodes] for s in decision.starts
            if s.job_id in index and index[s.job_id] not in prefix}


def _assert_jointly_within_capacity(
    problem: Problem, kept: dict[int, list[int]], held: list[Held]
) -> None:
    by_index = {j.index: j for j in problem.jobs}
    profile = NodeProfile(problem)
    for h in held:
        profile.take(h.job, h.start, list(h.nodes))
    for i, nodes in kept.items():
        profile.take(by_index[i], 0, nodes)
    assert bool(np.all(profile.free >= 0)), "a start delays a reservation"


@pytest.mark.parametrize("name", ["hcp19", "pcp20"])
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot=snapshots())
def test_the_pass_keeps_starts_only_where_they_delay_no_reservation(
    name: str, snapshot: Snapshot
) -> None:
    # The starts of the head-only decision (depth 1) go through the pass with depth 3.
    _, decision = decide(name, snapshot, EASY_HEAD)
    problem, prefix, head = after_prefix(snapshot)
    assume(head is not None)
    assert head is not None
    placements = _placements(problem, decision, prefix)
    kept, held = keep_later_reservations(problem, placements, head, DEPTH)
    assert set(kept) <= set(placements)
    assert held[0].job is head.job and 1 <= len(held) <= DEPTH
    assert all(h.start > 0 for h in held)
    assert not {h.job.index for h in held} & set(kept)
    submits = [(h.job.submit, h.job.index) for h in held]
    assert submits == sorted(submits)  # the oldest blocked jobs, in submit order
    _assert_jointly_within_capacity(problem, kept, held)


@pytest.mark.parametrize("name", ["hcp19", "pcp20"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot=snapshots())
def test_every_decision_with_depth_three_keeps_easys_prefix_and_the_reservations(
    name: str, snapshot: Snapshot
) -> None:
    decision = assert_easys_head_promise(name, snapshot, EASY_3)
    # The decision's own starts, through the pass again, all stay where they are; with the
    # reservations that pass makes, no node is ever over its capacity.
    problem, prefix, head = after_prefix(snapshot)
    if head is not None:
        placements = _placements(problem, decision, prefix)
        kept, held = keep_later_reservations(problem, placements, head, DEPTH)
        assert kept == placements
        _assert_jointly_within_capacity(problem, kept, held)


def test_the_pass_stops_when_asked() -> None:
    snapshot = _two_nodes_three_jobs()
    problem, prefix, head = after_prefix(snapshot)
    assert head is not None and not prefix
    with pytest.raises(Stopped):
        keep_later_reservations(problem, {}, head, 2, should_stop=lambda: True)


def _two_nodes_three_jobs() -> Snapshot:
    return Snapshot(
        time=T, nodes=(node(0, cores=12), node(1, cores=8)),
        running=(running("r0", "n0", 8, ends_in=100), running("r1", "n1", 4, ends_in=50)),
        queued=(queued("wide", 12, 100, submit=T - 50), queued("next", 8, 200, submit=T - 45),
                queued("young", 4, 300, submit=T - 10)),
    )


def test_a_young_job_that_respects_the_head_waits_when_it_would_delay_the_next_one():
    # n0 (12 cores) is busy with 8 until t + 100; n1 (8 cores) with 4 until t + 50.
    # "wide" (12 cores) is the head, reserved on n0 at t + 100; "next" (8 cores, 200 s) is the
    # next blocked job, its earliest start on n1 at t + 50. "young" (4 cores, 300 s) fits on
    # n1 now without touching the head, but would push "next" back.
    snapshot = _two_nodes_three_jobs()
    for name in ("hcp19", "pcp20"):
        _, head_only = decide(name, snapshot, EASY_HEAD)
        assert {s.job_id for s in head_only.starts} == {"young"}, name
        _, deeper = decide(name, snapshot, dataclasses.replace(EASY_HEAD, easy_head_depth=2))
        assert not deeper.starts, name
