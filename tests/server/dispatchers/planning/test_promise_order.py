"""The order `place_promise` walks the nodes in (`promises._promise_order`) against the sort it
replaced: every node holding a unit by (units it could hold before the start, free amount left
at the start, node), a full lexsort. On many nodes only the first rn_i are ranked (each gives
a unit at least): they must be the full sort's first rn_i, in its order."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hpcdispatch.server.dispatchers.planning.promises import _promise_order


@settings(max_examples=400, deadline=None)
@given(st.integers(1, 600), st.integers(1, 40), st.integers(0, 2**32 - 1))
def test_the_first_units_are_the_full_sorts(count: int, units: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    fit = rng.integers(0, 3, count)  # many nodes hold none
    before = rng.integers(0, 3, count)  # few values: many ties, broken by node
    left = rng.integers(-2, 6, count)
    nodes = np.flatnonzero(fit > 0)
    full = nodes[np.lexsort((nodes, left[nodes], before[nodes]))]
    got = _promise_order(fit, before, left, units)
    assert got.tolist()[: units] == full.tolist()[: units]
    assert set(got.tolist()) <= set(full.tolist())
