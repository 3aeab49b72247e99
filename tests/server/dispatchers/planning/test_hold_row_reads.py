"""The reads of `NodeProfile`'s hold rows against the plain reads they replace.

- `add_rows` (the rows added by column with `np.bincount`) against `np.add.at`, with amounts
  small and large enough to take the exact fallback;
- `row_min`, `row_any_negative` (column by column) against `min(axis=1)`, `(< 0).any(axis=1)`;
- `_node_time_order` (one argsort of a key) against `np.lexsort((when, where))`, the same
  permutation, ties included; `_sorted_unique` against `np.unique`;
- the rows read as a range of the rows in time order since the last merge (`_rows_between`,
  `_free_at`) against a test of every row, after random sequences of holds, give-backs (rows
  that merge away), copies, checkpoints restored, `adopt` and failed `take_all`s (rows dropped
  again): what is free at each time and the rows inside each run must be the plain reads',
  and `free_during` read from the changes must be the grid's.
"""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcdispatch.server.dispatchers.planning import node_profile
from hpcdispatch.server.dispatchers.planning.job_selection import never_fits
from hpcdispatch.server.dispatchers.planning.node_profile import (
    NodeProfile,
    _node_time_order,
    _sorted_unique,
    add_rows,
    row_any_negative,
    row_min,
)
from tests.instances import problem_of
from tests.server.dispatchers.planning.test_earliest_reference import random_snapshot
from tests.server.dispatchers.planning.test_units_over_runs import random_job


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 400), st.sampled_from([10, 10**6, 2**50]))
def test_add_rows_adds_what_add_at_adds(seed: int, rows: int, scale: int) -> None:
    rng = np.random.default_rng(seed)
    nodes = int(rng.integers(1, 50))
    free = rng.integers(-scale, scale, size=(nodes, 3))
    where = rng.integers(0, nodes, size=rows)
    amounts = rng.integers(-scale, scale, size=(rows, 3))
    expected = free.copy()
    np.add.at(expected, where, amounts)
    add_rows(free, where, amounts)
    assert np.array_equal(free, expected)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 300))
def test_the_key_order_is_lexsorts_and_the_unique_keys_npuniques(seed: int, rows: int) -> None:
    rng = np.random.default_rng(seed)
    low = int(rng.integers(0, 1000))
    high = low + int(rng.integers(0, 50))
    where = rng.integers(0, 20, size=rows)
    when = rng.integers(low, high + 1, size=rows)
    assert np.array_equal(_node_time_order(where, when, low, high), np.lexsort((when, where)))
    keys = rng.integers(0, 40, size=rows)
    assert np.array_equal(_sorted_unique(keys), np.unique(keys))


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(0, 300), st.integers(1, 4))
def test_the_row_reductions_are_numpys(seed: int, rows: int, types: int) -> None:
    values = np.random.default_rng(seed).integers(-5, 5, size=(rows, types))
    assert np.array_equal(row_min(values), values.min(axis=1))
    assert np.array_equal(row_any_negative(values), (values < 0).any(axis=1))


def plain_free_at(profile: NodeProfile, when: int) -> np.ndarray:
    """What is free at `when`: now, plus every release and every hold row up to it."""
    run = profile._run
    free = run.base.copy()
    done = run.ends <= when
    np.add.at(free, run.nodes[done], run.amounts[done])
    times, nodes, amounts = profile._holds()
    hit = times <= when
    np.add.at(free, nodes[hit], amounts[hit])
    return free


def assert_reads_plain(profile: NodeProfile, rng: random.Random) -> None:
    times, _, _ = profile._holds()
    horizon = int(times.max()) + 2 if len(times) else 10
    for _ in range(6):
        low = rng.randint(0, horizon)
        high = low + rng.randint(0, 300)
        assert np.array_equal(profile._free_at(low), plain_free_at(profile, low))
        assert np.array_equal(profile._rows_between(low, high),
                              np.flatnonzero((times > low) & (times < high)))
        from_changes = profile._least_from_changes(low, max(high, low + 1))
        node_profile.DENSE_CELLS, kept = 10**9, node_profile.DENSE_CELLS
        try:
            profile._grid = None
            on_grid = profile._least(low, max(high, low + 1))
        finally:
            node_profile.DENSE_CELLS = kept
            profile._grid = None
        assert np.array_equal(from_changes, on_grid)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(20, 160))
def test_the_rows_in_time_order_read_as_every_row_read_one_by_one(seed: int, holds: int) -> None:
    rng = random.Random(seed)
    problem = problem_of(random_snapshot(rng))
    profile = NodeProfile(problem)
    taken: list[tuple[object, int, list[int]]] = []
    saved = []
    for index in range(holds):
        job = random_job(rng, problem, index)
        if never_fits(problem, job):
            continue
        start = profile.earliest(job, not_before=rng.choice((0, rng.randint(0, 500))))
        nodes = profile.place(job, start)
        taken.append((job, start, nodes))
        move = rng.random()
        if move < 0.15 and taken:  # given back: its rows cancel at the next merge
            job, start, nodes = taken.pop(rng.randrange(len(taken)))
            profile.give_back(job, start, nodes)  # type: ignore[arg-type]
        elif move < 0.25:
            saved.append(profile.checkpoint())
        elif move < 0.3 and saved:  # an earlier state: rows merged since are not its rows
            profile.restore(saved.pop(rng.randrange(len(saved))))
            taken = []
        elif move < 0.35:
            other = profile.copy()
            assert_reads_plain(other, rng)
            other.take(job, start, nodes)  # type: ignore[arg-type]
            profile.adopt(other)
        elif move < 0.4 and len(nodes):  # rows pushed then dropped: a take_all that fails
            victim = nodes[0]
            profile.add_boundaries((start, start + job.duration))
            crowd = [(start, job, [victim] * job.units)] * 50
            if not profile.take_all(crowd):  # type: ignore[arg-type]
                pass
            else:
                taken.extend((j, s, ns) for s, j, ns in crowd)
        if index % 10 == 0:
            assert_reads_plain(profile, rng)
    assert_reads_plain(profile, rng)
