"""The head's τ found release by release in Python (few releases) against the numpy sweep over
every release (issue #52): the same release index, and the same free amounts at τ, on random
pools with one and with several resource types, overfull nodes, nodes that are not eligible
and ties of release times; and `reserve` the same whichever sweep it takes."""

from __future__ import annotations

import random

import numpy as np
import pytest

from hpcdispatch.server.dispatchers.planning import reservation
from hpcdispatch.server.dispatchers.planning.problem import Job
from hpcdispatch.server.dispatchers.planning.reservation import (
    _first_release_fitting,
    _first_release_fitting_small,
)
from hpcdispatch.server.domain.free_pool import FreePool, units_per_node
from tests.server.dispatchers.planning.test_scale_indexes import random_problem

SCALE = (16, 64, 2)


def random_case(rng: random.Random, width: int
                ) -> tuple[FreePool, Job, tuple[np.ndarray, ...]]:
    """Nodes of `width` resource types (1: processors only, the one-type sweep's case)."""
    nodes = rng.randint(1, 12)
    free = [(rng.randint(-8, 16), rng.choice([0, 16, 64, -8]), rng.randint(0, 2))[:width]
            for _ in range(nodes)]
    eligible = [rng.random() < 0.85 for _ in range(nodes)]
    pool = FreePool(free, eligible, SCALE[:width])
    count = rng.randint(1, 30)
    ends = np.asarray(sorted(rng.randint(1, 12) for _ in range(count)), dtype=np.int64)
    where = np.asarray([rng.randrange(nodes) for _ in range(count)], dtype=np.int64)
    amounts = np.asarray([(rng.randint(0, 8), rng.choice([0, 8, 32]), rng.randint(0, 1))
                          for _ in range(count)], dtype=np.int64).reshape(count, 3)[:, :width]
    req = (rng.randint(0, 4), rng.choice([0, 8, 16]), rng.randint(0, 1))[:width]
    if not any(req):
        req = (1, 0, 0)[:width]
    # A head that fits once everything is released (as reserve's callers guarantee).
    job = Job(index=0, id="head", submit=0, units=1, req=req, duration=rng.randint(1, 20))
    return pool, job, (ends, where, amounts)


def fits_in_the_end(pool: FreePool, job: Job, ends: np.ndarray, where: np.ndarray,
                    amounts: np.ndarray) -> bool:
    try:
        _first_release_fitting(pool, job, ends, where, amounts)
    except AssertionError:
        return False
    return True


@pytest.mark.parametrize(("seed", "width"), [(s, w) for s in range(200) for w in (1, 3)])
def test_small_sweep_matches_the_numpy_sweep(seed: int, width: int) -> None:
    rng = random.Random(seed)
    pool, job, (ends, where, amounts) = random_case(rng, width)
    units = rng.randint(1, 10)
    job = Job(index=0, id="head", submit=0, units=units, req=job.req, duration=job.duration)
    if not fits_in_the_end(pool, job, ends, where, amounts):
        with pytest.raises(AssertionError):
            _first_release_fitting_small(pool, job, ends, where, amounts)
        return
    expected = _first_release_fitting(pool, job, ends, where, amounts)
    got, at = _first_release_fitting_small(pool, job, ends, where, amounts)
    assert got == expected
    # Free at τ: free now plus the releases up to τ, on the nodes they touch.
    given: dict[int, list[int]] = {}
    for n, row in zip(where[: expected + 1].tolist(), amounts[: expected + 1].tolist(),
                      strict=True):
        base = given.get(n, list(pool.free[n]))
        given[n] = [b + a for b, a in zip(base, row, strict=True)]
    assert at == given


@pytest.mark.parametrize(("seed", "coarse"), [(s, c) for s in range(40) for c in (False, True)])
def test_reserve_is_the_same_with_either_sweep(seed: int, coarse: bool,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    problem = random_problem(rng, coarse)
    free_now = problem.free_now.copy()
    started: list[tuple[Job, list[int]]] = []
    heads = []
    for job in problem.jobs:
        if sum(units_per_node(c, job.req) for c, up
               in zip(problem.capacity, problem.eligible, strict=True) if up) < job.units:
            continue  # never fits the system
        nodes = free_now.place(job.req, job.units) if rng.random() < 0.6 else None
        if nodes is None:
            heads.append(job)
        else:
            started.append((job, nodes))
    for head in heads:
        small = reservation.reserve(problem, free_now, head, started)
        with monkeypatch.context() as patched:
            patched.setattr(reservation, "SMALL_SWEEP", -1)
            large = reservation.reserve(problem, free_now, head, started)
        assert (small.start, small.nodes, small.at_start.free, small.limit.free) == (
            large.start, large.nodes, large.at_start.free, large.limit.free)
        assert small.limit.groups == large.limit.groups
