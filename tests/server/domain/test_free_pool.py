"""The free pool (server/domain/free_pool.py): its per-group heaps and numpy construction give
exactly what sorting every group gave, and copies, changed at random, stay independent (moved
here from the planning tests and the session tests, issue #52).
"""

from __future__ import annotations

import heapq
import random

import numpy as np
import pytest

from hpcdispatch.server.domain.free_pool import FreePool, NodeMask, Vec, units_per_node

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


def few_free(rng: random.Random, count: int) -> list[Vec]:
    return [(rng.randint(0, 4), rng.choice([0, 4, 8])) for _ in range(count)]


@pytest.mark.parametrize("seed", range(30))
def test_free_pool_copies_do_not_see_each_others_changes(seed: int) -> None:
    """Copy on write: pools copied from one another, each changed at random, always equal a
    pool built afresh from their own free vectors."""
    rng = random.Random(seed)
    count = rng.randint(1, 40)
    eligible = [rng.random() < 0.9 for _ in range(count)]
    pools = [FreePool(few_free(rng, count), eligible, (4, 8))]
    for _ in range(300):
        pool = rng.choice(pools)
        roll = rng.random()
        if roll < 0.15:
            pools.append(pool.copy() if roll < 0.1 else pool.in_node_order())
        elif roll < 0.5:
            pool.set(rng.randrange(count), few_free(rng, 1)[0])
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
    pool = FreePool(few_free(rng, count), eligible, (4, 8))
    for _ in range(40):
        pool.set(rng.randrange(count), few_free(rng, 1)[0])
    ordered = pool.in_node_order()
    fresh = FreePool.from_array(np.asarray(pool.free, dtype=np.int64).reshape(count, 2),
                                eligible, (4, 8))
    assert list(ordered.groups.items()) == list(fresh.groups.items())
    assert ordered.free == fresh.free


@pytest.mark.parametrize("seed", range(30))
def test_a_masked_choice_is_the_choice_on_the_masked_nodes_alone(seed: int) -> None:
    """Issue #50: `choose` and `place` with a NodeMask choose, by the same rules, what a pool
    of the mask's nodes alone would (best fit and first fit), and take nothing else."""
    rng = random.Random(seed)
    count = rng.randint(1, 60)
    free = random_free(rng, count)
    eligible = [rng.random() < 0.9 for _ in range(count)]
    pool = FreePool(free, eligible, SCALE)
    for _ in range(100):
        allowed = frozenset(n for n in range(count) if rng.random() < 0.6)
        excluded = frozenset(n for n in range(count) if rng.random() < 0.2)
        mask = NodeMask(allowed if rng.random() < 0.8 else None, excluded)
        alone = FreePool(pool.free, [e and n in mask for n, e in enumerate(pool.eligible)],
                         SCALE)
        req = (rng.randint(0, 4), rng.choice([0, 2, 4, 8]))
        if not any(req):
            req = (1, 0)
        units = rng.randint(1, 6)
        first_fit = rng.random() < 0.3
        expected = reference_choose(alone, req, units, first_fit)
        assert pool.choose(req, units, first_fit, mask) == expected
        if expected is not None:
            assert all(n in mask for n in expected)
            before = list(pool.free)
            assert pool.place(req, units, first_fit, mask) == expected
            taken = {n for n, vec in enumerate(pool.free) if vec != before[n]}
            assert taken == set(expected)
    assert pool.choose((1, 0), 1, False, NodeMask(frozenset())) is None
