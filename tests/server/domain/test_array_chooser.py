"""The array chooser (`choose_from_array`, what `NodeProfile.place` calls) against the pool it
replaced: `FreePool.from_array(free, eligible, scale).choose(req, units, first_fit)`, on random
free amounts.

The amounts are drawn from few values so that many nodes share a free vector and distinct
vectors share a best-fit score (the ties `choose` breaks by a group's lowest node), with nodes
down and, now and then, a negative amount (an overfull node, which `count_units` reads in its
own way)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcdispatch.server.domain import free_pool
from hpcdispatch.server.domain.free_pool import (
    FreePool,
    choose_from_array,
    count_units,
    units_per_row,
)


@st.composite
def cases(draw: st.DrawFn) -> tuple[np.ndarray, list[bool], tuple[int, ...], tuple[int, ...],
                                    int, bool]:
    types = draw(st.integers(1, 3))
    count = draw(st.integers(1, 40))
    values = draw(st.lists(st.integers(-1, 8), min_size=2, max_size=4))
    rows = draw(st.lists(st.lists(st.sampled_from(values), min_size=types, max_size=types),
                         min_size=count, max_size=count))
    free = np.asarray(rows, dtype=np.int64).reshape(count, types)
    eligible = draw(st.lists(st.booleans().map(lambda b: b or draw(st.booleans())),
                             min_size=count, max_size=count))
    scale = tuple(draw(st.lists(st.sampled_from((1, 2, 4, 8)), min_size=types,
                                max_size=types)))
    req = tuple(draw(st.lists(st.integers(0, 3), min_size=types, max_size=types)))
    units = draw(st.integers(1, 24))
    return free, eligible, scale, req, units, draw(st.booleans())


@settings(max_examples=400, deadline=None)
@given(case=cases())
def test_the_array_chooser_picks_the_pools_nodes(
    case: tuple[np.ndarray, list[bool], tuple[int, ...], tuple[int, ...], int, bool],
) -> None:
    free, eligible, scale, req, units, first_fit = case
    expected = FreePool.from_array(free, eligible, scale).choose(req, units, first_fit)
    got = choose_from_array(free, np.asarray(eligible, dtype=bool), scale, req, units,
                            first_fit)
    assert got == expected
    if free.min() >= 0:  # the caller may say so (NodeProfile without an overfull node)
        assert choose_from_array(free, np.asarray(eligible, dtype=bool), scale, req, units,
                                 first_fit, nonnegative=True) == expected


@settings(max_examples=400, deadline=None)
@given(case=cases())
def test_best_fit_ranking_only_the_nodes_it_can_reach_picks_the_pools_nodes(
    case: tuple[np.ndarray, list[bool], tuple[int, ...], tuple[int, ...], int, bool],
) -> None:
    """`_best_fit_few` on every call (as on a large system): the same nodes."""
    free, eligible, scale, req, units, _ = case
    expected = FreePool.from_array(free, eligible, scale).choose(req, units, False)
    selected_from = free_pool.SELECTED_FROM
    free_pool.SELECTED_FROM = 0
    try:
        got = choose_from_array(free, np.asarray(eligible, dtype=bool), scale, req, units)
    finally:
        free_pool.SELECTED_FROM = selected_from
    assert got == expected


@settings(max_examples=300, deadline=None)
@given(case=cases())
def test_units_per_row_is_count_units_row_by_row(
    case: tuple[np.ndarray, list[bool], tuple[int, ...], tuple[int, ...], int, bool],
) -> None:
    free, _, _, req, _, _ = case
    assert units_per_row(free, req).tolist() == [count_units(tuple(row), req)
                                                 for row in free.tolist()]


def test_score_ties_go_to_the_group_with_the_lowest_node() -> None:
    # (1, 2) and (2, 1) score 1.5 each on a scale of (2, 2), and both hold one unit of (1, 1):
    # best fit takes first the group whose lowest node comes first.
    rows = [[1, 2], [2, 1], [2, 1], [1, 2], [2, 1]]
    for shift in range(len(rows)):
        free = np.asarray(rows[shift:] + rows[:shift], dtype=np.int64)
        for units in range(1, 6):
            expected = FreePool.from_array(free, [True] * 5, (2, 2)).choose((1, 1), units)
            assert choose_from_array(free, np.ones(5, dtype=bool), (2, 2), (1, 1), units) \
                == expected
