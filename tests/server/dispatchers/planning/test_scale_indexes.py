"""The scale indexes (issue #12) against the simple implementations they replaced.

The head reservation's sweep over sorted releases must give exactly what re-scanning every
release time gave, on random instances (the free pool's own indexes: tests/server/domain/).
"""

from __future__ import annotations

import random
from collections import defaultdict

import numpy as np
import pytest

from hpcdispatch.server.dispatchers.planning import problem as problem_module
from hpcdispatch.server.dispatchers.planning.problem import (
    Job,
    Problem,
    RunningBlock,
    build_problem,
)
from hpcdispatch.server.dispatchers.planning.reservation import head_nodes, reserve
from hpcdispatch.server.domain.free_pool import FreePool, Vec, units_per_node
from hpcdispatch.snapshot import Node, NodeState, QueuedJob, RunningJob, Snapshot, UnitAllocation

SCALE = (8, 16)


def reference_reserve(
    problem: Problem, free_now: FreePool, head: Job, started: list[tuple[Job, list[int]]]
) -> tuple[int, list[Vec], list[Vec], int, tuple[int, ...]]:
    """reserve() before the sweep: give every release time in turn, re-check the whole pool,
    and choose the head's nodes on that pool (`head_nodes`, whose ties follow the pool's order
    of groups)."""
    by_end: dict[int, list[RunningBlock]] = defaultdict(list)
    for b in problem.blocks:
        if problem.eligible[b.node]:
            by_end[b.end].append(b)
    releases: dict[int, list[tuple[int, Vec]]] = {}
    for end, blocks in sorted(by_end.items()):
        releases.setdefault(end, []).extend((b.node, b.amounts) for b in blocks)
    for job, nodes in started:
        for n in nodes:
            releases.setdefault(job.duration, []).append((n, job.req))
    pool = free_now.copy()
    demand = head.demand()
    for end in sorted(releases):
        for n, amounts in releases[end]:
            pool.give(n, amounts)
        pooled = [
            sum(v[r] for v, up in zip(pool.free, pool.eligible, strict=True) if up)
            for r in range(len(problem.resources))
        ]
        if any(p < d for p, d in zip(pooled, demand, strict=True)):
            continue
        if pool.units_fit(head.req, head.units) >= head.units:
            placed = head_nodes(pool, free_now, head)
            pool.take_all(placed, head.req)
            limit = [tuple(map(min, a, b)) for a, b in zip(free_now.free, pool.free, strict=True)]
            start = problem.pooled_profile().earliest_start(demand, head.duration, end)
            return end, list(pool.free), limit, start, tuple(placed)
    raise AssertionError("never fits")


def random_problem(rng: random.Random, coarse: bool = False) -> Problem:
    """`coarse`: running jobs hold halves of a node's cores and memory, so that many nodes
    share a free vector and distinct vectors share a best-fit score ((8, 0) and (4, 8) on
    8-core, 16-GiB nodes), the ties the head's choice of nodes breaks by the pool's order."""
    count = rng.randint(2, 25)
    nodes = tuple(
        Node(f"n{i}", NodeState.UP if rng.random() < 0.9 else NodeState.DOWN,
             {"core": 8, "mem": 16})
        for i in range(count)
    )
    left = {n.id: {"core": 8, "mem": 16} for n in nodes}
    running = []
    for j in range(rng.randint(0, 3 * count)):
        units = []
        for _ in range(rng.randint(1, 3)):
            node = rng.choice(nodes).id
            amounts = {r: (rng.choice((0, left[node][r] // 2, left[node][r])) if coarse
                           else rng.randint(0, left[node][r])) for r in ("core", "mem")}
            for r, a in amounts.items():
                left[node][r] -= a
            units.append(UnitAllocation(node, amounts))
        running.append(RunningJob(f"r{j}", "u", "a", start_time=rng.randint(0, 99),
                                  requested_time=100, expected_duration=rng.randint(1, 200),
                                  units=tuple(units)))
    queued = [
        QueuedJob(f"q{i}", "u", "a", "batch", submit_time=rng.randint(0, 99),
                  units=rng.randint(1, 4),
                  unit_request={"core": rng.randint(1, 8), "mem": rng.randint(0, 16)},
                  requested_time=rng.randint(1, 300))
        for i in range(6)
    ]
    snapshot = Snapshot(100, nodes, tuple(running), tuple(queued))
    return build_problem(
        snapshot,
        {q.id: q.requested_time for q in queued},
        {r.id: r.expected_duration or 1 for r in running},
    )


@pytest.mark.parametrize(("seed", "coarse"), [(s, False) for s in range(60)]
                         + [(s, True) for s in range(100)])
def test_reserve_matches_rescanning_reference(seed: int, coarse: bool) -> None:
    # reserve() chooses the head's nodes node by node where no two groups of one score decide
    # (`_head_nodes_by_node`), on the pool the releases make where they do: both are checked.
    rng = random.Random(seed)
    problem = random_problem(rng, coarse)
    free_now = problem.free_now.copy()
    started: list[tuple[Job, list[int]]] = []
    blocked = []
    for job in problem.jobs:
        if sum(job.req[r] * job.units > c for r, c in enumerate(problem.up_capacity)):
            continue  # never fits the system
        nodes = free_now.place(job.req, job.units) if rng.random() < 0.6 else None
        if nodes is None:
            blocked.append(job)
        else:
            started.append((job, nodes))
    for head in blocked:
        if not any(units_per_node(c, head.req) for c, up
                   in zip(problem.capacity, problem.eligible, strict=True) if up):
            continue
        if sum(units_per_node(c, head.req) for c, up
               in zip(problem.capacity, problem.eligible, strict=True) if up) < head.units:
            continue
        expected = reference_reserve(problem, free_now, head, started)
        got = reserve(problem, free_now, head, started)
        assert (
            got.start, got.at_start.free, got.limit.free, got.pooled_start, got.nodes,
        ) == expected
        assert got.limit.groups == FreePool(expected[2], problem.eligible, SCALE).groups


def reference_pooled_releases(problem: Problem, steps: int) -> list[tuple[int, Vec]]:
    """Problem.pooled_releases before it shared the release order: np.unique and np.add.at."""
    up = problem.running.up
    ends = problem.running.ends[up]
    amounts = problem.running.amounts[up]
    distinct = np.unique(ends)
    if len(distinct) > steps:
        stride = -(-len(distinct) // steps)
        kept = np.unique(np.append(distinct[stride - 1 :: stride], distinct[-1]))
        ends = kept[np.searchsorted(kept, ends)]
        distinct = kept
    totals = np.zeros((len(distinct), len(problem.resources)), dtype=np.int64)
    np.add.at(totals, np.searchsorted(distinct, ends), amounts)
    return [(int(end), tuple(int(a) for a in row))
            for end, row in zip(distinct, totals, strict=True)]


@pytest.mark.parametrize("seed", range(40))
def test_pooled_releases_match_the_reference(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    steps = rng.choice([2, 5, 256])  # small caps merge ends, as 256 does on large systems
    monkeypatch.setattr(problem_module, "MAX_RELEASE_STEPS", steps)
    problem = random_problem(rng)
    assert problem.pooled_releases() == reference_pooled_releases(problem, steps)
