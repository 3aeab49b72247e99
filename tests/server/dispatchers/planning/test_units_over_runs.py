"""`NodeProfile.units_over_runs` (every candidate start of a job read in one sweep over the
changes) against the read it replaces in `earliest`: one `free_during` per candidate, the units
of job i per node summed (`units_fitting`).

Random systems (nodes down, running work ending at many times), holds taken one after another
at their earliest start, some where they do not fit (overfull nodes: negative amounts), some
given back, requests of one to three types, candidates anywhere (on and off the step
boundaries, from a later s_0): the sweep must count, at every candidate, the units the read
node by node counts. Then `earliest` with the sweep from the first candidate on
(`TESTED_ONE_BY_ONE` 0) must answer as the search one candidate at a time, and a conservative
decision on a synthetic snapshot must be the same with and without the sweep.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcdispatch.server.dispatchers import backfill
from hpcdispatch.server.dispatchers.planning import node_profile
from hpcdispatch.server.dispatchers.planning.job_selection import never_fits
from hpcdispatch.server.dispatchers.planning.node_profile import NodeProfile
from hpcdispatch.server.dispatchers.planning.problem import Job, Problem
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import homogeneous
from tests.instances import T, problem_of
from tests.server.dispatchers.planning.test_earliest_reference import (
    random_snapshot,
    reference_earliest,
)


def one_by_one(profile: NodeProfile, job: Job, candidates: list[int]) -> list[int]:
    """The units of job i that fit node by node over each candidate's run, read one by one."""
    return [int(profile.units_fitting(profile.free_during(s, s + job.duration), job).sum())
            for s in candidates]


def random_job(rng: random.Random, problem: Problem, index: int) -> Job:
    amounts = {"core": rng.randint(0, 4), "gpu": rng.choice((0, 0, 1)),
               "mem": rng.choice((0, 1, 3))}
    req = tuple(amounts[r] for r in problem.resources)
    return Job(index, f"j{index}", T, rng.randint(1, 6), req, rng.randint(1, 300))


def filled_profile(rng: random.Random, problem: Problem, holds: int) -> NodeProfile:
    """A profile with `holds` holds at their earliest starts, a few overfull, a few given back."""
    profile = NodeProfile(problem)
    taken: list[tuple[Job, int, list[int]]] = []
    for index in range(holds):
        job = random_job(rng, problem, index)
        if never_fits(problem, job):
            continue
        start = profile.earliest(job, not_before=rng.choice((0, 0, rng.randint(0, 500))))
        if rng.random() < 0.1:  # taken where it does not fit: an overfull node
            victims = [n for n in range(len(problem.node_ids)) if problem.eligible[n]]
            nodes = [rng.choice(victims)] * job.units
            profile.take(job, start, nodes)
        else:
            nodes = profile.place(job, start)
        taken.append((job, start, nodes))
        if taken and rng.random() < 0.15:
            job, start, nodes = taken.pop(rng.randrange(len(taken)))
            profile.give_back(job, start, nodes)
    return profile


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 40), st.integers(1, 30))
def test_the_sweep_counts_what_the_read_node_by_node_counts(
    seed: int, holds: int, candidates: int,
) -> None:
    rng = random.Random(seed)
    problem = problem_of(random_snapshot(rng))
    profile = filled_profile(rng, problem, holds)
    for index in range(holds, holds + 5):
        job = random_job(rng, problem, index)
        times = profile.times.tolist()
        pool = times + [rng.randint(0, 900) for _ in range(len(times))]
        chosen = sorted(set(rng.choices(pool, k=candidates)))
        got = profile.units_over_runs(job, np.asarray(chosen, dtype=np.int64))
        if not any(job.req):
            assert got.tolist() == [0] * len(chosen)
            continue
        assert got.tolist() == one_by_one(profile, job, chosen), (job, chosen)
        expected = next((k for k, u in enumerate(one_by_one(profile, job, chosen))
                         if u >= job.units), -1)
        assert profile.first_fitting(job, np.asarray(chosen, dtype=np.int64)) == expected


@pytest.mark.parametrize("seed", range(60))
def test_earliest_by_the_sweep_answers_as_the_search_one_candidate_at_a_time(
    seed: int, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(node_profile, "DENSE_CELLS", 0)  # the changes, not the grid
    monkeypatch.setattr(node_profile, "TESTED_ONE_BY_ONE", 0)  # every candidate by the sweep
    rng = random.Random(seed)
    problem = problem_of(random_snapshot(rng))
    profile = NodeProfile(problem)
    for index in range(40):
        job = random_job(rng, problem, index)
        if never_fits(problem, job) or not any(job.req):
            continue
        not_before = rng.choice((0, 0, rng.randint(0, 500)))
        expected = reference_earliest(profile, job, not_before)
        assert profile.earliest(job, not_before=not_before) == expected
        profile.place(job, expected)


def test_a_conservative_plan_is_the_same_with_and_without_the_sweep(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """300 nodes each running one job, 300 queued: most jobs are tried at many candidates."""
    system = homogeneous("h300", 300, {"core": 32, "mem": 131072})
    problem = problem_of(synthetic_snapshot(system, 300, 1.0, seed=0))
    monkeypatch.setattr(node_profile, "DENSE_CELLS", 0)
    order = sorted(problem.jobs, key=lambda j: j.index)
    swept = backfill.plan_backfill(problem, order)
    monkeypatch.setattr(node_profile, "TESTED_ONE_BY_ONE", 10**9)  # never the sweep
    read_one_by_one = backfill.plan_backfill(problem, order)
    assert swept.reservations == read_one_by_one.reservations
    assert sum(s > 0 for s, _ in swept.reservations.values()) > 100  # reserved, not started
