"""The promise room's starts at t (`StartPools`) against reading the profile node by node.

Random systems with running work, random promises held later on random nodes (some on nodes
busy now, some overlapping each other's room), then a run of jobs started now one after
another: for each, whether it fits until its requested time around every promise, and the
nodes it gets, must be what `fits_guarded` / `place_guarded` read off a second profile that
takes the same starts (the exact reads the pools replace), and the pools' amounts what
`free_during(0, d_i)` reads.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from hpcdispatch.server.dispatchers.planning import node_profile
from hpcdispatch.server.dispatchers.planning.job_selection import never_fits
from hpcdispatch.server.dispatchers.planning.node_profile import NodeProfile
from hpcdispatch.server.dispatchers.planning.problem import Job, Problem
from hpcdispatch.server.dispatchers.planning.promise_room import PromiseRoom, at_limit
from hpcdispatch.server.dispatchers.planning.promises import fits_guarded, place_guarded
from tests.instances import T
from tests.server.dispatchers.planning.test_node_profile import random_problem


@pytest.fixture(autouse=True, params=["grid", "changes"])
def planner_reads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test twice: on the grid small profiles are read from, and on the changes alone
    (what large ones read: `node_profile.DENSE_CELLS` 0)."""
    if request.param == "changes":
        monkeypatch.setattr(node_profile, "DENSE_CELLS", 0)


def random_job(rng: random.Random, problem_resources: int, index: int) -> Job:
    req = (rng.randint(0, 3), rng.choice((0, 0, 1)))[:problem_resources]
    duration = rng.randint(1, 120)
    return Job(index, f"j{index}", T, rng.randint(1, 4), req, duration,
               requested=duration + rng.choice((0, 0, rng.randint(1, 60))))


def promised_room(rng: random.Random, problem: Problem, fewest: int
                  ) -> tuple[NodeProfile, PromiseRoom]:
    """A few promises later on (at least `fewest`), where they fit: a second profile holding
    them (the exact reads) and the promise room around them."""
    profile = NodeProfile(problem)
    ahead: dict[int, tuple[int, list[int]]] = {}
    for index in range(rng.randint(fewest, 4)):
        job = random_job(rng, len(problem.resources), index)
        if never_fits(problem, job):
            continue
        start = profile.earliest(job, not_before=rng.randint(1, 60))
        ahead[index] = (start, profile.place(job, start))
    return profile.copy(), PromiseRoom(profile, None, ahead, frozenset(ahead))


@pytest.mark.parametrize("seed", range(80))
def test_starts_at_t_read_what_the_profile_reads_node_by_node(seed: int) -> None:
    rng = random.Random(seed)
    problem = random_problem(rng)
    types = len(problem.resources)
    exact, room = promised_room(rng, problem, fewest=0)
    free_now = problem.free_now.copy()
    for index in range(100, 100 + rng.randint(1, 12)):
        job = random_job(rng, types, index)
        if never_fits(problem, job):
            continue
        limited = at_limit(job)
        least = np.maximum(exact.free_during(0, limited.duration), 0)
        pool = room.pool_for(job, free_now)
        for n in np.flatnonzero(np.asarray(problem.eligible)).tolist():
            assert pool.free[n] == tuple(least[n].tolist()), (index, n)
        fits = fits_guarded(exact, limited, 0, None)
        assert room.fits(job) == fits, index
        nodes = room.place(free_now, job, first_fit=rng.random() < 0.3)
        assert (nodes is not None) == fits
        if nodes is not None:  # the second profile takes the same start
            assert exact.fits_on(limited, 0, nodes)
            exact.take(limited, 0, nodes)


@pytest.mark.parametrize("seed", range(40))
def test_the_nodes_a_start_gets_are_the_profiles_choice(seed: int) -> None:
    rng = random.Random(1000 + seed)
    problem = random_problem(rng)
    types = len(problem.resources)
    exact, room = promised_room(rng, problem, fewest=1)
    free_now = problem.free_now.copy()
    for index in range(100, 110):
        job = random_job(rng, types, index)
        if never_fits(problem, job):
            continue
        first_fit = rng.random() < 0.3
        limited = at_limit(job)
        want = (place_guarded(exact, limited, 0, None, first_fit)
                if fits_guarded(exact, limited, 0, None) else None)
        assert room.place(free_now, job, first_fit) == want, index
