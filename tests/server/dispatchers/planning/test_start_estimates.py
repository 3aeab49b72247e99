"""The waiting jobs' planned starts (`start_estimates.StepPlan`) are those of the pooled capacity
profile's list schedule (`CapacityProfile.earliest_start` then `reserve`), on random step
functions of one and of three resource types."""

from __future__ import annotations

import random

import numpy as np
import pytest

from hpcdispatch.server.dispatchers.planning.capacity_profile import CapacityProfile
from hpcdispatch.server.dispatchers.planning.start_estimates import StepPlan


@pytest.mark.parametrize("types", [1, 3])
@pytest.mark.parametrize("seed", range(12))
def test_a_step_plan_plans_as_the_capacity_profile(seed: int, types: int) -> None:
    rng = random.Random(seed)
    capacity = [rng.randint(8, 64) for _ in range(types)]
    steps = rng.randint(1, 40)
    times = np.cumsum([0] + [rng.randint(1, 300) for _ in range(steps - 1)])
    # Free amounts that grow towards the whole machine at the last step (the running ends).
    free = np.asarray([[rng.randint(0, c) for c in capacity] for _ in range(steps)])
    free = np.maximum.accumulate(free, axis=0)
    free[-1] = capacity
    releases = [(int(t), tuple(int(x) for x in row))
                for t, row in zip(times[1:], np.diff(free, axis=0), strict=True)]
    profile = CapacityProfile(tuple(int(x) for x in free[0]), releases)
    plan = StepPlan(times, free)
    for _ in range(30):
        demand = tuple(rng.randint(0, c) for c in capacity)
        duration = rng.randint(1, 2000)
        expected = profile.earliest_start(demand, duration)
        profile.reserve(demand, expected, duration)
        assert plan.plan(demand, duration) == expected


def test_a_demand_beyond_the_machine_fits_at_no_time() -> None:
    plan = StepPlan(np.asarray([0, 10]), np.asarray([[4], [8]]))
    with pytest.raises(ValueError, match="every time"):
        plan.plan((9,), 5)
