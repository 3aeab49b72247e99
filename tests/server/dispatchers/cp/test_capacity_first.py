"""Capacity used now first, then slowdown (`SearchSettings.capacity_first`): a CP decision starts
at least as many processors now as LOS's packing, around the same head reservation, and among
such decisions the model minimises the papers' slowdown.

The processors are compared with the LOS baseline's own decision on the same snapshot, on
machines of one-core nodes, where the packing's pooled count is exact node by node."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hpcdispatch.server.dispatchers.planning.greedy_schedule import greedy_schedule
from hpcdispatch.server.dispatchers.planning.processor_packing import (
    most_processors_now,
    packed_first,
    processors_now,
)
from hpcdispatch.server.dispatchers.planning.reservation import reserve
from hpcdispatch.server.domain.profiles import PROFILES, resolve_settings
from hpcdispatch.server.domain.search_settings import SearchRequest
from hpcdispatch.snapshot import Decision, Snapshot
from tests.instances import FAST, T, decide, node, problem_of, queued, running
from tests.server.dispatchers.cp.test_easy_head import EASY_HEAD, assert_easys_head_promise
from tests.server.dispatchers.cp.test_later_reservations import after_prefix
from tests.server.dispatchers.test_decision_property import snapshots

CAPACITY = dataclasses.replace(EASY_HEAD, capacity_first=True)
# Every fitting job in the window, and LOS's lookahead over the whole queue.
WIDE_WINDOW = dataclasses.replace(CAPACITY, window=100, lookahead_depth=100)


def _processors(decision: Decision) -> int:
    """Processors started now on a machine of one-core nodes: one per unit."""
    return sum(len(s.nodes) for s in decision.starts)


def _short_or_wide() -> Snapshot:
    # Six one-core nodes; n4 and n5 are busy until t + 100. "wide" (6 nodes) is the head,
    # reserved on all six at t + 100, so only jobs that end by then may start. "short" (1
    # node, 10 s) now and "four" (4 nodes, 90 s) after it is the least slowdown; "four" now
    # uses four processors instead of one.
    return Snapshot(
        time=T, nodes=tuple(node(i, cores=1) for i in range(6)),
        running=(running("r4", "n4", 1, ends_in=100), running("r5", "n5", 1, ends_in=100)),
        queued=(queued("wide", 1, 100, submit=T - 50, units=6),
                queued("four", 1, 90, submit=T - 30, units=4),
                queued("short", 1, 10, submit=T - 20)),
    )


@pytest.mark.parametrize("name", ["hcp19", "pcp20"])
def test_the_most_processors_now_win_over_the_least_slowdown(name: str) -> None:
    snapshot = _short_or_wide()
    _, slowdown_first = decide(name, snapshot, EASY_HEAD)
    assert {s.job_id for s in slowdown_first.starts} == {"short"}
    _, capacity_first = decide(name, snapshot, CAPACITY)
    assert {s.job_id for s in capacity_first.starts} == {"four"}


def test_among_the_most_processors_the_least_slowdown_starts() -> None:
    # Two sets start four processors now: {"old", "young"} (3 + 1 nodes) and {"four"}. The
    # model prefers, among them, the one with the least total slowdown: "four" (90 s) now and
    # the two others after it costs more than the two short ones now and "four" after them.
    snapshot = Snapshot(
        time=T, nodes=tuple(node(i, cores=1) for i in range(6)),
        running=(running("r4", "n4", 1, ends_in=100), running("r5", "n5", 1, ends_in=100)),
        queued=(queued("wide", 1, 100, submit=T - 50, units=6),
                queued("four", 1, 90, submit=T - 40, units=4),
                queued("old", 1, 5, submit=T - 30, units=3),
                queued("young", 1, 5, submit=T - 20)),
    )
    _, decision = decide("pcp20", snapshot, dataclasses.replace(CAPACITY, window=3))
    assert {s.job_id for s in decision.starts} == {"old", "young"}


@st.composite
def one_core_snapshots(draw: st.DrawFn) -> Snapshot:
    """A machine of 3–10 one-core nodes, some busy, and 1–8 queued jobs of 1 core per unit."""
    count = draw(st.integers(3, 10))
    nodes = tuple(node(i, cores=1) for i in range(count))
    busy = draw(st.lists(st.booleans(), min_size=count, max_size=count))
    ends = draw(st.lists(st.integers(1, 200), min_size=count, max_size=count))
    run = tuple(running(f"r{i}", f"n{i}", 1, ends_in=ends[i]) for i in range(count) if busy[i])
    jobs = draw(st.lists(st.tuples(st.integers(1, count), st.integers(1, 300)),
                         min_size=1, max_size=8))
    queue = tuple(queued(f"q{k}", 1, d, submit=T - 500 + k, units=u)
                  for k, (u, d) in enumerate(jobs))
    return Snapshot(time=T, nodes=nodes, running=run, queued=queue)


def _most_processors_after_the_prefix(snapshot: Snapshot) -> int:
    """By enumeration, on one-core nodes: the most processors the jobs after EASY's prefix can
    start now without delaying the head. Of the nodes free now, the head's leave room only for
    jobs that end by τ."""
    left, _, reservation = after_prefix(snapshot)
    core = left.resources.index("core")
    free = sum(vec[core] for vec in left.free_now.free)
    if reservation is None:
        return min(free, sum(j.units for j in left.jobs))
    beside_head = sum(vec[core] for vec in reservation.limit.free)
    others = [j for j in left.jobs if j is not reservation.job]
    best = 0
    for chosen in itertools.product((False, True), repeat=len(others)):
        jobs = [j for j, c in zip(others, chosen, strict=True) if c]
        now = sum(j.units for j in jobs)
        past = sum(j.units for j in jobs if reservation.runs_past(j))
        if now <= free and past <= beside_head:
            best = max(best, now)
    return best


@pytest.mark.parametrize("name", ["hcp19", "pcp20"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot=one_core_snapshots())
def test_the_most_processors_start_now(name: str, snapshot: Snapshot) -> None:
    decision = assert_easys_head_promise(name, snapshot, WIDE_WINDOW)
    _, prefix = decide("fcfs", snapshot)
    after_prefix = _processors(decision) - _processors(prefix)
    assert after_prefix == _most_processors_after_the_prefix(snapshot)
    _, los = decide("los", snapshot, WIDE_WINDOW)
    assert _processors(decision) >= _processors(los)


@pytest.mark.parametrize("name", ["hcp19", "pcp20"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot=snapshots())
def test_every_capacity_first_decision_keeps_easys_head_promise(
    name: str, snapshot: Snapshot
) -> None:
    assert_easys_head_promise(name, snapshot, CAPACITY)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot=one_core_snapshots())
def test_a_list_schedule_with_the_packing_first_starts_it(snapshot: Snapshot) -> None:
    # On one-core nodes the packing's set is placed whole: the list schedule that starts it
    # first starts at least its processors now, without moving the head's reservation.
    problem = problem_of(snapshot)
    head, *rest = sorted(problem.jobs, key=lambda j: (j.submit, j.index))
    if problem.free_now.place(head.req, head.units, False) is not None:
        return  # the head fits: there is no reservation to pack around
    reservation = reserve(problem, problem.free_now.copy(), head)
    packing = most_processors_now(problem, problem.free_now, reservation, rest)
    plan = greedy_schedule(problem, packed_first(problem, rest, reservation), True, False,
                           reservation)
    assert processors_now(problem, rest, plan) >= sum(rest[k].units for k in packing)
    assert all(plan.start_offsets[rest[k].index] == 0 for k in packing)


def test_a_packed_job_that_runs_past_the_heads_start_is_placed_first() -> None:
    # n0 (4 cores, 1 GPU) has its GPU busy until t + 100: the head (4 cores and the GPU) is
    # reserved there, and n0's cores are free only until then. n1 (4 cores) has 2 busy until
    # t + 100, and its 2 free cores are all a job running past τ may use. The packing starts
    # "short" (2 cores, 10 s) and "long" (2 cores, 500 s) together; placed in queue order,
    # "short" would take n1's 2 cores (the tighter fit) and leave "long" nowhere.
    snapshot = Snapshot(
        time=T, nodes=(node(0, cores=4, gpu=1), node(1, cores=4, gpu=0)),
        running=(running("r0", "n0", 0, ends_in=100, gpu=1),
                 running("r1", "n1", 2, ends_in=100, gpu=0)),
        queued=(queued("head", 4, 100, submit=T - 50, gpu=1),
                queued("short", 2, 10, submit=T - 40, gpu=0),
                queued("long", 2, 500, submit=T - 30, gpu=0)),
    )
    problem = problem_of(snapshot)
    head, short, long = problem.jobs
    reservation = reserve(problem, problem.free_now.copy(), head)
    assert reservation.runs_past(long) and not reservation.runs_past(short)
    assert sorted(most_processors_now(problem, problem.free_now, reservation, [short, long])) \
        == [0, 1]
    order = packed_first(problem, [short, long], reservation)
    assert order == [long, short]
    plan = greedy_schedule(problem, order, True, False, reservation)
    assert plan.start_offsets[long.index] == plan.start_offsets[short.index] == 0
    in_queue_order = greedy_schedule(problem, [short, long], True, False, reservation)
    assert in_queue_order.start_offsets[long.index] > 0  # what the order avoids


def test_search_parameters_carry_capacity_first() -> None:
    # The request's field reaches the settings of the profile it names.
    search = SearchRequest("qos", {"capacity_first": True})
    assert resolve_settings(search, "book").capacity_first
    assert not resolve_settings(SearchRequest("qos"), "book").capacity_first
    assert FAST.capacity_first is False
    # The book starts capacity now first (what the retired "packing" profile added), and the
    # request can turn it off.
    assert resolve_settings(SearchRequest("book"), "qos").capacity_first
    off = resolve_settings(SearchRequest("book", {"capacity_first": False}), "qos")
    assert off == dataclasses.replace(PROFILES["book"][0], capacity_first=False)
