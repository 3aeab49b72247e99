"""CapacityProfile (pooled free capacity over time) against a second-by-second reference.

Random releases and reservations; after each reservation, every earliest start must be the
first second s >= not_before from which the demand fits for `duration` seconds, reading the
free amounts second by second (the last step lasting for ever).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from hpcdispatch.server.dispatchers.planning.capacity_profile import CapacityProfile
from hpcdispatch.server.domain.free_pool import Vec

HORIZON = 80  # seconds simulated by the reference; everything happens before


def free_at(free_now: Vec, releases: list[tuple[int, Vec]],
            reserved: list[tuple[Vec, int, int]], second: int) -> list[int]:
    free = list(free_now)
    for when, amounts in releases:
        if when <= second:
            free = [f + a for f, a in zip(free, amounts, strict=True)]
    for demand, start, duration in reserved:
        if start <= second < start + duration:
            free = [f - d for f, d in zip(free, demand, strict=True)]
    return free


def reference_start(free_now: Vec, releases: list[tuple[int, Vec]],
                    reserved: list[tuple[Vec, int, int]], demand: Vec, duration: int,
                    not_before: int) -> int:
    for start in range(not_before, 2 * HORIZON):
        window = range(start, min(start + duration, 2 * HORIZON))
        if all(all(f >= d for f, d in zip(free_at(free_now, releases, reserved, s), demand,
                                           strict=True)) for s in window):
            return start
    raise AssertionError("no start in the simulated horizon")


@pytest.mark.parametrize("seed", range(40))
def test_earliest_start_and_reserve_match_the_reference(seed: int) -> None:
    rng = random.Random(seed)
    free_now = (rng.randint(0, 6), rng.randint(0, 6))
    releases = [(rng.randint(1, 30), (rng.randint(0, 4), rng.randint(0, 4)))
                for _ in range(rng.randint(0, 8))]
    profile = CapacityProfile(free_now, releases)
    total = tuple(free_now[r] + sum(a[r] for _, a in releases) for r in range(2))
    reserved: list[tuple[Vec, int, int]] = []
    for _ in range(12):
        demand = (rng.randint(0, total[0]), rng.randint(0, total[1]))
        duration = rng.randint(1, 15)
        not_before = rng.choice([0, 0, rng.randint(0, 40)])
        expected = reference_start(free_now, releases, reserved, demand, duration, not_before)
        assert profile.earliest_start(demand, duration, not_before) == expected
        if expected + duration < HORIZON and rng.random() < 0.7:
            profile.reserve(demand, expected, duration)
            reserved.append((demand, expected, duration))
            total = tuple(min(t, f) for t, f in zip(total, free_at(
                free_now, releases, reserved, 2 * HORIZON - 1), strict=True))


@pytest.mark.parametrize("seed", range(40))
def test_a_profile_from_its_steps_is_the_one_from_its_releases(seed: int) -> None:
    """`from_steps(times, free)` (the book's pooled view, arrays in) against the constructor
    given free[0] and each step's change as a release: the same steps, the same answers."""
    rng = random.Random(seed)
    types = rng.randint(1, 3)
    steps = rng.randint(1, 12)
    times = [0]
    for _ in range(steps - 1):
        times.append(times[-1] + rng.randint(1, 9))
    free = [[rng.randint(0, 6) for _ in range(types)] for _ in range(steps)]
    releases = [(times[k], tuple(free[k][r] - free[k - 1][r] for r in range(types)))
                for k in range(1, steps)]
    made = CapacityProfile(tuple(free[0]), releases)
    from_steps = CapacityProfile.from_steps(np.asarray(times, dtype=np.int64),
                                            np.asarray(free, dtype=np.int64))
    for _ in range(20):
        demand = tuple(rng.randint(0, 6) for _ in range(types))
        duration, not_before = rng.randint(1, 30), rng.randint(0, 60)
        if any(d > f for d, f in zip(demand, free[-1], strict=True)):
            continue  # never fits: both raise
        assert from_steps.earliest_start(demand, duration, not_before) == made.earliest_start(
            demand, duration, not_before)
        assert from_steps.starts_now(demand, duration) == made.starts_now(demand, duration)
        start = made.earliest_start(demand, duration, not_before)
        made.reserve(demand, start, duration)
        from_steps.reserve(demand, start, duration)
