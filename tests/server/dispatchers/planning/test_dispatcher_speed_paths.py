"""The dispatchers' fast paths against the plain ones they stand for.

- CapacityProfile answers from a lower bound and applies reservations in batches: every answer
  must still be the one of the second-by-second reference, whatever mix of reservations (later
  starts, reservations given back) and queries comes.
- FreePool.place moves best fit's nodes between groups together: the pool must end as
  `choose` then `take_all` leave it (same nodes, same groups in the same order), copies too.
- `stable_order` is numpy's stable argsort; `every_few` passes the first question on.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from hpcdispatch.server.dispatchers.planning.capacity_profile import CapacityProfile
from hpcdispatch.server.dispatchers.planning.problem import stable_order
from hpcdispatch.server.dispatchers.planning.stopping import every_few, never
from hpcdispatch.server.domain.free_pool import FreePool, Vec
from tests.server.dispatchers.planning.test_capacity_profile import HORIZON
from tests.server.dispatchers.planning.test_capacity_profile import (
    reference_start as second_by_second_start,
)


def reference_start(free_now: Vec, releases: list[tuple[int, Vec]],
                    reserved: list[tuple[Vec, int, int]], demand: Vec, duration: int,
                    not_before: int) -> int | None:
    """The second-by-second reference of
    tests/server/dispatchers/planning/test_capacity_profile.py; None: no start in its simulated
    horizon."""
    try:
        return second_by_second_start(free_now, releases, reserved, demand, duration, not_before)
    except AssertionError:
        return None


@pytest.mark.parametrize("seed", range(60))
def test_lazy_profile_matches_the_reference(seed: int) -> None:
    rng = random.Random(seed)
    free_now = (rng.randint(0, 40), rng.randint(0, 40))
    releases = [(rng.randint(1, 30), (rng.randint(0, 6), rng.randint(0, 6)))
                for _ in range(rng.randint(0, 8))]
    profile = CapacityProfile(free_now, releases)
    reserved: list[tuple[Vec, int, int]] = []
    copies = 0
    for _ in range(40):
        demand = (rng.randint(0, 12), rng.randint(0, 12))
        duration = rng.randint(1, 15)
        not_before = rng.choice([0, 0, 0, rng.randint(0, 40)])
        expected = reference_start(free_now, releases, reserved, demand, duration, not_before)
        if expected is None:
            continue  # beyond every step: callers never ask
        if not_before == 0 and rng.random() < 0.5:
            assert profile.starts_now(demand, duration) == (expected == 0)
        else:
            assert profile.earliest_start(demand, duration, not_before) == expected
        if expected + duration < HORIZON and rng.random() < 0.8:
            profile.reserve(demand, expected, duration)
            reserved.append((demand, expected, duration))
            if rng.random() < 0.2:  # one given back, as left_shift does before moving it
                given, start, length = rng.choice(reserved)
                profile.reserve(tuple(-d for d in given), start, length)
                reserved.remove((given, start, length))
        if rng.random() < 0.1 and copies < 3:
            profile, copies = profile.copy(), copies + 1


def _pools_equal(a: FreePool, b: FreePool) -> None:
    assert a.free == b.free
    assert list(a.groups.items()) == list(b.groups.items())  # same groups, same order
    for vec, group in a.groups.items():
        assert a.smallest(vec, len(group)) == b.smallest(vec, len(group)) == sorted(group)


@pytest.mark.parametrize("seed", range(30))
def test_place_leaves_the_pool_as_choose_and_take_all(seed: int) -> None:
    rng = random.Random(seed)
    count = rng.randint(1, 80)
    free = [(rng.choice([0, 4, 8, 8, 8]), rng.choice([0, 8, 16, 16])) for _ in range(count)]
    eligible = [rng.random() < 0.9 for _ in range(count)]
    fast = FreePool(free, eligible, (8, 16))
    slow = FreePool(free, eligible, (8, 16))
    kept = [fast.copy()]  # a copy shares groups with the pool: it must not change
    kept_free = list(kept[0].free)
    kept_groups = {vec: set(group) for vec, group in kept[0].groups.items()}
    for _ in range(150):
        req = (rng.choice([0, 1, 2, 4]), rng.choice([0, 2, 4, 8]))
        if not any(req):
            req = (1, 0)
        units = rng.randint(1, 6)
        expected = slow.choose(req, units)
        if expected is not None:
            slow.take_all(expected, req)
        assert fast.place(req, units) == expected
        _pools_equal(fast, slow)
        if rng.random() < 0.3:  # nodes come back (running work ends)
            n = rng.randrange(count)
            slow.set(n, free[n])
            fast.set(n, free[n])
        if rng.random() < 0.05:
            fast, slow = fast.copy(), slow.copy()
    assert kept[0].free == kept_free
    assert {vec: set(group) for vec, group in kept[0].groups.items()} == kept_groups


def test_stable_order_is_the_stable_argsort() -> None:
    rng = np.random.default_rng(0)
    for count in (0, 1, 2, 7, 1000):
        for high in (1, 3, 1000, 2**40, 2**62):
            keys = rng.integers(-high, high, count, dtype=np.int64)
            assert stable_order(keys).tolist() == np.argsort(keys, kind="stable").tolist()


def test_every_few_asks_the_first_time_and_then_every_few_times() -> None:
    asked: list[int] = []

    def should_stop() -> bool:
        asked.append(1)
        return True

    check = every_few(should_stop, 4)
    answers = [check() for _ in range(9)]
    assert answers == [True, False, False, False, True, False, False, False, True]
    assert len(asked) == 3
    assert every_few(never) is never
