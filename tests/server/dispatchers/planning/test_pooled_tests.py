"""Conservative's pooled tests of every held reservation at once (`pooled_tests`) against the
tests job by job they replace.

On random step functions (overfull steps too) and random blocks on step boundaries, the
arrays must answer what `first_room` and `room_now` answer on the pooled view with the job's
own block given back; on random node profiles, `earlier_all` what `could_start_before` and
`starts_now_without` answer; and conservative decisions over a sequence of snapshots (the
book carried between them, running work ending early) must leave the same reservations, node
for node, as with the tests asked job by job.
"""

from __future__ import annotations

import dataclasses
import random
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcdispatch.server.dispatchers import DISPATCHERS, backfill
from hpcdispatch.server.dispatchers.base import CallerScope, SearchControl
from hpcdispatch.server.dispatchers.conservative import ConservativeDispatcher, Held
from hpcdispatch.server.dispatchers.planning.capacity_profile import first_room, room_now
from hpcdispatch.server.dispatchers.planning.job_selection import never_fits
from hpcdispatch.server.dispatchers.planning.node_profile import NodeProfile
from hpcdispatch.server.dispatchers.planning.pooled_tests import earlier_all, earlier_in_pooled
from hpcdispatch.server.dispatchers.planning.problem import Job
from hpcdispatch.server.domain.profiles import PROFILES
from hpcdispatch.server.pipeline import run_decision
from hpcdispatch.server.predictors.walltime import WalltimePredictor
from hpcdispatch.snapshot import Snapshot
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import PRESETS
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.instances import T, node, problem_of, running

Blocks = list[tuple[int, int, tuple[int, ...]]]  # (start, duration, demand)


@st.composite
def step_functions(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, Blocks]:
    steps = draw(st.integers(2, 9))
    types = draw(st.integers(1, 2))
    gaps = draw(st.lists(st.integers(1, 5), min_size=steps - 1, max_size=steps - 1))
    times = np.concatenate(([0], np.cumsum(gaps))).astype(np.int64)
    pooled = np.asarray(draw(st.lists(st.integers(-2, 6), min_size=steps * types,
                                      max_size=steps * types)), dtype=np.int64)
    blocks = []
    for _ in range(draw(st.integers(1, 6))):
        a = draw(st.integers(0, steps - 2))
        b = draw(st.integers(a + 1, steps - 1))
        demand = tuple(draw(st.integers(0, 4)) for _ in range(types))
        blocks.append((int(times[a]), int(times[b] - times[a]), demand))
    return times, pooled.reshape(steps, types), blocks


@settings(max_examples=400, deadline=None)
@given(step_functions())
def test_the_arrays_answer_as_the_pooled_view_with_each_block_given_back(
    case: tuple[np.ndarray, np.ndarray, Blocks],
) -> None:
    times, pooled, blocks = case
    # The last step lasts for ever: room there for every demand, as for a job that fits.
    pooled[-1] = np.maximum(pooled[-1], 4)
    starts = np.asarray([s for s, _, _ in blocks], dtype=np.int64)
    durations = np.asarray([d for _, d, _ in blocks], dtype=np.int64)
    demands = np.asarray([q for _, _, q in blocks], dtype=np.int64)
    earlier = earlier_in_pooled(times, pooled, starts, durations, demands)
    now = earlier_in_pooled(times, pooled, starts, durations, demands, now_only=True)
    assert earlier is not None and now is not None
    for j, (start, duration, demand) in enumerate(blocks):
        given_back = pooled.copy()
        inside = (times >= start) & (times < start + duration)
        given_back[inside] += np.asarray(demand, dtype=np.int64)
        expected = start > 0 and first_room(times, given_back, demand, duration) < start
        assert bool(earlier[j]) == expected, j
        if start > 0:
            assert bool(now[j]) == room_now(times, given_back, demand, duration), j


def test_a_block_off_the_step_boundaries_is_left_to_the_tests_job_by_job() -> None:
    times = np.asarray([0, 5, 9], dtype=np.int64)
    pooled = np.asarray([[1], [2], [3]], dtype=np.int64)
    one = np.asarray([1], dtype=np.int64)
    assert earlier_in_pooled(times, pooled, np.asarray([3]), one, one[None]) is None
    assert earlier_in_pooled(times, pooled, np.asarray([5]), np.asarray([2]), one[None]) is None
    assert earlier_in_pooled(times, pooled, np.asarray([5]), np.asarray([4]),
                             one[None]) is not None


@pytest.mark.parametrize("seed", range(40))
def test_earlier_all_answers_as_the_profile_job_by_job(seed: int) -> None:
    rng = random.Random(seed)
    nodes = tuple(node(i, cores=rng.randint(1, 6), gpu=rng.randint(0, 2)) for i in range(5))
    work = [running(f"r{k}", nodes[k].id, 1, rng.randint(1, 40)) for k in range(4)]
    problem = problem_of(Snapshot(time=T, nodes=nodes, running=tuple(work), queued=()))
    profile = NodeProfile(problem)
    held: list[tuple[int, Job]] = []
    for index in range(12):
        req = (rng.randint(0, 3), rng.randint(0, 1))
        job = Job(index, f"j{index}", T, rng.randint(1, 3), req, rng.randint(1, 30))
        if not any(req) or never_fits(problem, job):
            continue
        start = profile.earliest(job, not_before=rng.randint(0, 30))
        profile.place(job, start)
        held.append((start, job))
    for now_only in (False, True):
        asked = [(s, job) for s, job in held if s > 0 or not now_only]
        by_job = [profile.starts_now_without(job, s) if now_only
                  else profile.could_start_before(job, s) for s, job in asked]
        assert earlier_all(profile, asked, now_only) == by_job


def one_by_one(profile: NodeProfile, held: list[tuple[int, Job]],
               now_only: bool = False) -> list[bool]:
    ask = profile.starts_now_without if now_only else profile.could_start_before
    return [ask(job, s) for s, job in held]


def books(snapshots: list[Snapshot]) -> list[Held]:
    """The reservations conservative leaves after each decision on these snapshots."""
    dispatcher = ConservativeDispatcher()
    table = {**DISPATCHERS, pb.DISPATCHER_CONSERVATIVE: dispatcher}
    left = []
    for snapshot in snapshots:
        control = SearchControl(settings=PROFILES["qos"][0], scope=CallerScope(),
                                deadline=time.monotonic() + 600)
        result = run_decision(snapshot, pb.DISPATCHER_CONSERVATIVE, WalltimePredictor(),
                              control, dispatchers=table)
        assert not result.fallback_code
        (book,) = dispatcher.book._books.values()
        left.append(dict(book.after))
    return left


@pytest.mark.parametrize("seed", range(4))
def test_conservative_keeps_the_same_book_as_with_the_tests_job_by_job(
    seed: int, monkeypatch: pytest.MonkeyPatch,
) -> None:
    first = synthetic_snapshot(PRESETS["eurora"], 60, busy=0.9, seed=seed)
    snapshots = [first]
    for k in range(1, 4):  # running work ends early, a few jobs start: reservations move
        last = snapshots[-1]
        snapshots.append(dataclasses.replace(last, time=first.time + 300 * k,
                                             running=last.running[::2]))
    fast = books(snapshots)
    monkeypatch.setattr(backfill, "earlier_all", one_by_one)
    assert books(snapshots) == fast
