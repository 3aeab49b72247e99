"""EASY's head reservation kept between decisions (`KeptReservation`) against one made anew.

Random clusters decided twice: at t, and a few seconds later with the same running work (the
same release times) and one more job submitted, or with a change that must make it anew (a
job ended, a node went down, another head). Whatever the kept one hands out must equal what
`reserve` makes from scratch on the later problem: the same τ after t, nodes, amounts at τ and
limit, and a copy the backfill may change without touching the next one."""

from __future__ import annotations

import dataclasses
import random

import pytest

from hpcdispatch.server.dispatchers.planning.job_selection import never_fits
from hpcdispatch.server.dispatchers.planning.problem import Problem, build_problem
from hpcdispatch.server.dispatchers.planning.reservation import (
    KeptReservation,
    Reservation,
    reserve,
)
from hpcdispatch.snapshot import Node, NodeState, QueuedJob, RunningJob, Snapshot, UnitAllocation


def _cluster(rng: random.Random) -> tuple[tuple[Node, ...], tuple[RunningJob, ...],
                                          list[QueuedJob]]:
    nodes = tuple(Node(f"n{i}", NodeState.UP, {"core": 8, "mem": 16})
                  for i in range(rng.randint(2, 12)))
    left = {n.id: {"core": 8, "mem": 16} for n in nodes}
    running = []
    for j in range(rng.randint(1, 3 * len(nodes))):
        node = rng.choice(nodes).id
        amounts = {r: rng.choice((0, left[node][r] // 2, left[node][r])) for r in left[node]}
        for r, a in amounts.items():
            left[node][r] -= a
        running.append(RunningJob(f"r{j}", "u", "a", start_time=rng.randint(0, 99),
                                  requested_time=400, expected_duration=rng.randint(50, 300),
                                  units=(UnitAllocation(node, amounts),)))
    queued = [QueuedJob(f"q{i}", "u", "a", "batch", submit_time=i, units=rng.randint(1, 6),
                        unit_request={"core": rng.randint(1, 8), "mem": rng.randint(0, 8)},
                        requested_time=rng.randint(1, 300)) for i in range(4)]
    return nodes, tuple(running), queued


def _problem(t: int, nodes: tuple[Node, ...], running: tuple[RunningJob, ...],
             queued: list[QueuedJob]) -> Problem:
    return build_problem(Snapshot(t, nodes, running, tuple(queued)),
                         {q.id: q.requested_time for q in queued},
                         {r.id: r.expected_duration or 1 for r in running})


def _same(a: Reservation, b: Reservation) -> bool:
    return (a.start, a.at_start.free, a.limit.free, a.nodes, a.job.id, a.pooled_start) == (
        b.start, b.at_start.free, b.limit.free, b.nodes, b.job.id, b.pooled_start)


@pytest.mark.parametrize("seed", range(80))
def test_a_kept_reservation_is_the_one_made_anew(seed: int) -> None:
    rng = random.Random(seed)
    nodes, running, queued = _cluster(rng)
    kept = KeptReservation()
    first = _problem(100, nodes, running, queued)
    heads = [j for j in first.jobs if not never_fits(first, j)
             and first.free_now.units_fit(j.req, j.units) < j.units]
    if not heads:
        pytest.skip("every job fits now")
    head = heads[0]
    made = kept.reserve(first, first.free_now.copy(), head)
    assert _same(made, reserve(first, first.free_now.copy(), head))
    # Backfilling changes the copy it was handed, never what is kept.
    made.limit.set(made.nodes[0], (0, 0))
    made.at_start.take_all(list(made.nodes), head.req)
    change = rng.choice(("submitted", "submitted", "ended", "down", "later head"))
    later = [*queued, QueuedJob("q-new", "u", "a", "batch", 105, 1, {"core": 1}, 10)]
    run, cluster = running, nodes
    if change == "ended":
        run = running[1:]
    elif change == "down":
        cluster = (dataclasses.replace(nodes[0], state=NodeState.DOWN), *nodes[1:])
    t = 100 + rng.randint(0, 40)  # before the first release: the same ends after t
    if change == "submitted" or change == "down":
        t = min(t, 100 + min(first.running.ends.tolist(), default=1) - 1)
    second = _problem(t, cluster, run, later)
    again = next(j for j in second.jobs if j.id == head.id)
    if change == "later head":
        again = dataclasses.replace(again, duration=again.duration + 1)
    if never_fits(second, again) or second.free_now.units_fit(again.req, again.units) \
            >= again.units:
        return
    got = kept.reserve(second, second.free_now.copy(), again)
    assert _same(got, reserve(second, second.free_now.copy(), again))
