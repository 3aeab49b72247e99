"""The scale indexes (issue #12) against the simple implementations they replaced.

FreePool's per-group heaps and numpy construction, and the head reservation's sweep over
sorted releases, must give exactly what sorting every group and re-scanning every release
time gave, on random instances.
"""

from __future__ import annotations

import heapq
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


def reference_choose(pool: FreePool, req: Vec, units: int, first_fit: bool) -> list[int] | None:
    """FreePool.choose before the heaps: sort groups by (score, min node), nsmallest."""
    fitting = [(vec, nodes, units_per_node(vec, req)) for vec, nodes in pool.groups.items()]
    fitting = [f for f in fitting if f[2] > 0]
    if sum(k * len(nodes) for _, nodes, k in fitting) < units:
        return None
    chosen: list[int] = []
    if first_fit:
        for n, k in sorted((n, k) for _, nodes, k in fitting for n in nodes):
            chosen.extend([n] * min(k, units - len(chosen)))
            if len(chosen) == units:
                break
        return chosen
    fitting.sort(key=lambda f: (pool.score(f[0]), min(f[1])))
    for _, nodes, k in fitting:
        count = -(-(units - len(chosen)) // k)
        for n in heapq.nsmallest(count, nodes):
            chosen.extend([n] * min(k, units - len(chosen)))
        if len(chosen) == units:
            break
    return chosen


def random_free(rng: random.Random, count: int) -> list[Vec]:
    return [(rng.randint(0, 8), rng.choice([0, 4, 8, 16])) for _ in range(count)]


@pytest.mark.parametrize("seed", range(30))
def test_free_pool_choose_matches_reference(seed: int) -> None:
    rng = random.Random(seed)
    count = rng.randint(1, 60)
    eligible = [rng.random() < 0.9 for _ in range(count)]
    pool = FreePool(random_free(rng, count), eligible, SCALE)
    for _ in range(200):
        req = (rng.randint(0, 4), rng.choice([0, 2, 4, 8]))
        if not any(req):
            req = (1, 0)
        units = rng.randint(1, 6)
        first_fit = rng.random() < 0.3
        expected = reference_choose(pool, req, units, first_fit)
        assert pool.choose(req, units, first_fit) == expected
        copy = pool.copy() if rng.random() < 0.2 else pool
        if expected is not None and rng.random() < 0.7:
            copy.take_all(expected, req)
        n = rng.randrange(count)
        if rng.random() < 0.5:  # nodes leave and come back to a group: stale heap entries
            old = copy.free[n]
            copy.set(n, (0, 0))
            copy.set(n, old)
        else:
            copy.set(n, random_free(rng, 1)[0])
        pool = copy
        for vec, group in pool.groups.items():
            assert pool.first(vec) == min(group)
            k = rng.randint(1, len(group) + 2)
            assert pool.smallest(vec, k) == sorted(group)[:k]


@pytest.mark.parametrize("seed", range(20))
def test_free_pool_from_array_matches_node_by_node(seed: int) -> None:
    rng = random.Random(seed)
    count = rng.randint(0, 80)
    free = random_free(rng, count)
    eligible = [rng.random() < 0.8 for _ in range(count)]
    slow = FreePool(free, eligible, SCALE)
    fast = FreePool.from_array(np.asarray(free, dtype=np.int64).reshape(count, 2), eligible, SCALE)
    assert fast.free == slow.free
    assert list(fast.groups.items()) == list(slow.groups.items())  # same groups, same order
    assert all(type(a) is int for vec in fast.free for a in vec)


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
