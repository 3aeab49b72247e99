"""NodeProfile (free amounts per node over time, conservative backfilling's plan) against a
second-by-second reference.

Random systems (some nodes down, running work on them) and random operations: reservations
taken where they fit (one by one, or several at once) and given back, placements at the
earliest start, checkpoints restored, boundaries added all at once and dropped again. After
each one every query must read what the reference reads second by second (the last second
lasting for ever), and the steps must be those reserving one by one makes: the ends of the
running work and every start and end a reservation was taken or given back at.
"""

from __future__ import annotations

import random

import numpy as np
import numpy.typing as npt
import pytest

from hpcdispatch.server.dispatchers.planning import node_profile
from hpcdispatch.server.dispatchers.planning.job_selection import never_fits
from hpcdispatch.server.dispatchers.planning.node_profile import NodeProfile
from hpcdispatch.server.dispatchers.planning.problem import Job, Problem
from hpcdispatch.snapshot import NodeState, Snapshot
from tests.instances import T, node, problem_of, running


@pytest.fixture(autouse=True, params=["grid", "changes"])
def planner_reads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test twice: on the grid small profiles are read from, and on the changes alone
    (what large ones read: `node_profile.DENSE_CELLS` 0)."""
    if request.param == "changes":
        monkeypatch.setattr(node_profile, "DENSE_CELLS", 0)

HORIZON = 200  # seconds of the reference; every end falls before HORIZON // 2
Grid = npt.NDArray[np.int64]  # (seconds, nodes, types)


def random_problem(rng: random.Random) -> Problem:
    nodes = tuple(
        node(i, cores=rng.randint(1, 6), gpu=rng.randint(0, 2),
             state=NodeState.DOWN if rng.random() < 0.15 else NodeState.UP)
        for i in range(rng.randint(2, 6)))
    work = []
    for k in range(rng.randint(0, 8)):
        n = rng.choice(nodes)
        cores = rng.randint(1, n.capacity["core"])
        if sum(u.amounts["core"] for r in work for u in r.units if u.node_id == n.id) + cores \
                <= n.capacity["core"]:
            work.append(running(f"r{k}", n.id, cores, rng.randint(1, 40)))
    return problem_of(Snapshot(time=T, nodes=nodes, running=tuple(work), queued=()))


def reference(problem: Problem) -> Grid:
    """Free amounts per second, node and type, from what is free now and the running ends."""
    shape = (len(problem.node_ids), len(problem.resources))
    now = np.asarray(problem.free_now.free, dtype=np.int64).reshape(shape)
    now[~np.asarray(problem.eligible, dtype=bool)] = 0
    grid = np.repeat(now[None], HORIZON, axis=0)
    run = problem.running
    for n, amounts, end, up in zip(run.nodes, run.amounts, run.ends, run.up, strict=True):
        if up:
            grid[end:, n] += amounts
    return grid


def need(problem: Problem, job: Job, nodes: list[int]) -> Grid:
    counts = np.bincount(np.asarray(nodes, dtype=np.int64), minlength=len(problem.node_ids))
    return counts[:, None] * np.asarray(job.req, dtype=np.int64)[None, :]


def fits_on(problem: Problem, grid: Grid, job: Job, start: int, nodes: list[int]) -> bool:
    if len(nodes) != job.units or not all(problem.eligible[n] for n in nodes):
        return False
    return bool(np.all(grid[start:start + job.duration] >= need(problem, job, nodes)))


def units_fit(grid: Grid, job: Job, start: int) -> int:
    free = grid[start:start + job.duration].min(axis=0)
    req = np.asarray(job.req, dtype=np.int64)
    asked = req > 0
    return int((free[:, asked] // req[asked]).min(axis=1).sum())


def earliest(grid: Grid, job: Job) -> int:
    return next(s for s in range(HORIZON - job.duration) if units_fit(grid, job, s) >= job.units)


def pooled_earliest(grid: Grid, job: Job) -> int:
    pooled = grid.sum(axis=1)
    demand = np.asarray(job.demand(), dtype=np.int64)
    return next(s for s in range(HORIZON - job.duration)
                if np.all(pooled[s:s + job.duration] >= demand))


def random_job(rng: random.Random, problem: Problem, index: int) -> Job | None:
    req = (rng.randint(0, 3), rng.randint(0, 1))
    job = Job(index, f"j{index}", T, rng.randint(1, 3), req, rng.randint(1, 20))
    return None if not any(req) or never_fits(problem, job) else job


def assert_same(problem: Problem, profile: NodeProfile, grid: Grid, bounds: set[int]) -> None:
    """The profile reads as the grid at every second, with the steps one by one would make."""
    times = profile.times.tolist()
    assert times == sorted(bounds)
    for k, start in enumerate(times):
        end = times[k + 1] if k + 1 < len(times) else HORIZON
        assert np.array_equal(profile.free[k], grid[start]), (k, start)
        assert bool(np.all(grid[start:end] == grid[start]))
        assert np.array_equal(profile.free_during(start, end), grid[start])


@pytest.mark.parametrize("seed", range(60))
def test_node_profile_matches_the_second_by_second_reference(seed: int) -> None:
    rng = random.Random(seed)
    problem = random_problem(rng)
    profile = NodeProfile(problem)
    grid = reference(problem)
    releases = {int(e) for e, up in zip(problem.running.ends, problem.running.up, strict=True)
                if up}
    bounds = {0} | releases
    taken: list[tuple[Job, int, list[int]]] = []
    saved: tuple[object, Grid, list[tuple[Job, int, list[int]]]] | None = None
    for step in range(40):
        assert_same(problem, profile, grid, bounds)
        job = random_job(rng, problem, step)
        if job is None:
            continue
        op = rng.random()
        if op < 0.3:  # a held reservation: taken where it fits
            start = rng.randint(0, 60)
            nodes = [rng.randrange(len(problem.node_ids)) for _ in range(job.units)]
            fits = fits_on(problem, grid, job, start, nodes)
            assert profile.fits_on(job, start, nodes) == fits
            if fits:
                profile.take(job, start, nodes)
                grid[start:start + job.duration] -= need(problem, job, nodes)
                taken.append((job, start, nodes))
                bounds |= {start, start + job.duration}
        elif op < 0.55:  # a new reservation at its earliest start
            start = earliest(grid, job)
            assert profile.earliest(job) == start
            assert profile.fits_at(job, start) and (start == 0 or not profile.fits_at(job, 0))
            if start + job.duration < HORIZON // 2:
                nodes = profile.place(job, start)
                grid[start:start + job.duration] -= need(problem, job, nodes)
                assert bool(np.all(grid >= 0))
                taken.append((job, start, nodes))
                bounds |= {start, start + job.duration}
        elif op < 0.75 and taken:  # compression's questions, then giving one back
            held, start, nodes = taken.pop(rng.randrange(len(taken)))
            without = grid.copy()
            without[start:start + held.duration] += need(problem, held, nodes)
            first = pooled_earliest(without, held)
            assert profile.could_start_before(held, start) == (first < start)
            assert profile.starts_now_without(held, start) == (first == 0)
            assert_same(problem, profile, grid, bounds)  # the questions leave it as it was
            profile.give_back(held, start, nodes)
            grid = without
        elif op < 0.8:  # held reservations taken all at once if each fits after the others
            held = [(rng.randint(0, 60), j, [rng.randrange(len(problem.node_ids))
                                             for _ in range(j.units)])
                    for j in (random_job(rng, problem, 100 * step + k) for k in range(4)) if j]
            after = grid.copy()
            fits = True
            for start, j, nodes in held:
                fits = fits and fits_on(problem, after, j, start, nodes)
                after[start:start + j.duration] -= need(problem, j, nodes)
            profile.add_boundaries(b for start, j, _ in held for b in (start, start + j.duration))
            assert profile.take_all(held) == fits
            if fits:
                grid = after
                taken.extend((j, start, nodes) for start, j, nodes in held)
                bounds |= {b for start, j, _ in held for b in (start, start + j.duration)}
            assert_same(problem, profile, grid, set(profile.times.tolist()))
            profile.keep_boundaries(bounds - releases)
        elif op < 0.88:  # boundaries for many reservations at once, the unused ones dropped
            extra = {rng.randint(0, 90) for _ in range(5)}
            profile.add_boundaries(extra)
            assert set(profile.times.tolist()) == bounds | extra
            assert_same(problem, profile, grid, bounds | extra)
            profile.keep_boundaries(bounds - releases)  # the running ends stay anyway
        elif saved is None:
            saved = (profile.checkpoint(), grid.copy(), list(taken))
        else:
            state, grid, taken = saved
            profile.restore(state)  # type: ignore[arg-type]
            bounds = set(profile.times.tolist())
            saved = None
    assert_same(problem, profile, grid, bounds)


def test_a_node_overfull_during_the_run_fails_every_fit_on_test_as_before() -> None:
    # A reservation taken without a test (as EASY's head is) overfills n0 over [0, 10): a
    # held reservation over that time fails `fits_on` even on another node.
    problem = problem_of(Snapshot(time=T, nodes=(node(0, cores=1), node(1, cores=4)),
                                  running=(), queued=()))
    profile = NodeProfile(problem)
    big = Job(0, "big", T, 1, (2, 0) if len(problem.resources) == 2 else (2,), 10)
    small = Job(1, "small", T, 1, (1, 0) if len(problem.resources) == 2 else (1,), 5)
    assert profile.fits_on(small, 5, [1])
    profile.take(big, 0, [0])
    assert not profile.fits_on(small, 5, [1])
    assert profile.fits_on(small, 10, [1])
    profile.give_back(big, 0, [0])
    assert profile.fits_on(small, 5, [1])
