"""What is free when, node by node and pooled: the planner every reservation and promise uses.

Free amounts per node and resource type after t form a step function per node (relative to t,
0 = now, the last step lasting for ever): what is free now, plus what the running work releases
at its ends, less what each hold (a reservation, a promise) takes over [s, s + d). It is kept
sparse, as the changes that make it, never as a (steps × nodes) grid:

- `_base`, what is free now per node (nodes that are not up hold nothing);
- the running work's releases, sorted by end (fixed for the decision): the free amounts at s
  are `_base` plus the releases up to s, remembered for the few s read again and again;
- the holds, as change rows (time, node, ± amounts): −need at s on each node a hold takes,
  +need at s + d. Giving a hold back adds the opposite rows; rows that cancel are merged away
  now and then.

A node's least free amount over [s, e) is its amount at s unless a hold starts on it inside
(s, e) (releases and hold ends only add), so only the few nodes a hold starts on within the run
are walked event by event: a query costs the nodes once plus the changes inside the run, not
nodes × steps. The pooled view (the sum over nodes, one row per step, spare rows at its end
for new boundaries) finds candidate starts first, since a job that does not fit the pooled
capacity cannot fit node by node (a necessary condition only: on a fragmented system most
of them fail node by node). `earliest` then reads the first candidate node by node and the
rest together, in sweeps over the changes up to the last candidate's run (`units_over_runs`:
the units job i fits over each run, summed over nodes, from the nodes' step functions), so a
search costs the changes it reads, not nodes × candidates. Copies and checkpoints copy the
pooled view and the hold rows only.

A site's rules (`Eligibility`, issue #50): job i may use only the nodes of E_i, and none of the
nodes of a window that does not admit it while its run [s, s + requested_i) overlaps the
window's [start, end): the window is a hold on its nodes for the jobs it does not admit, and
none for the ones it admits. So every verb that places job i at a start s (`earliest`,
`fits_at`, `fits_on`, `place`, `take_all`, `free_for`) reads the free amounts off those nodes as
zero (`usable`), and `earliest` also tries the windows' ends: where a job waits for a window,
it starts when the window ends. Without rules (`problem.eligibility` None) every verb takes
the path it took before, at the cost it had.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from functools import lru_cache
from itertools import chain

import numpy as np
import numpy.typing as npt

from ...domain.free_pool import Vec, choose_from_array
from .capacity_profile import first_room, room_now
from .eligibility import Eligibility
from .problem import Job, Problem
from .stopping import StopCheck, never, stop_if

Counts = npt.NDArray[np.int64]
# times, pooled (used steps only), hold rows (times, nodes, amounts), and whether some free
# amount may be negative.
State = tuple[Counts, Counts, Counts, Counts, Counts, bool]

# Free amounts at this many release counts are remembered (each costs nodes × types).
_KEPT_RELEASE_STATES = 16
# Up to this many steps × nodes × types, the grid of free amounts is built from the changes
# when read (and kept until the next change): on small systems (KTH-SP2's 100 nodes) one
# vectorised pass over the grid tests every candidate start of a job at once, cheaper than
# reading the changes candidate by candidate.
DENSE_CELLS = 1_000_000
# Candidate starts of `earliest` past the first read one by one (`free_during`) before the
# rest are read together in sweeps over the changes (`units_over_runs`), the first of
# `SWEPT_FIRST` candidates, each next one of 4 times as many.
TESTED_ONE_BY_ONE = 0
SWEPT_FIRST = 512


@lru_cache(maxsize=1 << 12)
def request_array(req: Vec) -> Counts:
    """The per-unit request as a read-only array (the same few requests recur all the time)."""
    array = np.asarray(req, dtype=np.int64)
    array.flags.writeable = False
    return array


def node_counts(nodes: list[int]) -> tuple[Counts, Counts]:
    """The distinct nodes of `nodes` (one entry per unit), sorted, and the units on each."""
    if len(nodes) <= 64:  # the usual few units: a dict beats np.unique's sort
        counted: dict[int, int] = {}
        for n in nodes:
            counted[n] = counted.get(n, 0) + 1
        columns = sorted(counted)
        return (np.asarray(columns, dtype=np.int64),
                np.asarray([counted[n] for n in columns], dtype=np.int64))
    unique, counts = np.unique(np.asarray(nodes, dtype=np.int64), return_counts=True)
    return unique, counts.astype(np.int64)


def add_rows(free: Counts, where: Counts, amounts: Counts) -> None:
    """free[where[k]] += amounts[k] for every row k (`np.add.at(free, where, amounts)`): by
    column, as counts weighted by the amounts (exact: every partial sum stays below 2^52)."""
    m = len(where)
    if m < 64 or int(np.abs(amounts).max()) * m >= 1 << 52:
        np.add.at(free, where, amounts)
        return
    for r in range(free.shape[1]):
        free[:, r] += np.rint(np.bincount(where, weights=amounts[:, r],
                                          minlength=free.shape[0])).astype(np.int64)


def row_min(values: Counts) -> Counts:
    """`values.min(axis=1)` of a (rows, types) array with a type or more, column by column (a
    reduction along rows of a few values each is an order of magnitude slower)."""
    least: Counts = values[:, 0].copy()
    for r in range(1, values.shape[1]):
        np.minimum(least, values[:, r], out=least)
    return least


def row_any_negative(values: Counts) -> npt.NDArray[np.bool_]:
    """`(values < 0).any(axis=1)`, column by column."""
    negative = np.zeros(values.shape[0], dtype=bool)
    for r in range(values.shape[1]):
        negative |= values[:, r] < 0
    return negative


def _node_time_order(where: Counts, when: Counts, low: int, high: int) -> Counts:
    """`np.lexsort((when, where))` (node by node, in time order, stable) for times in
    [low, high]: one argsort of the key node * span + (time - low)."""
    span = high - low + 1
    order: Counts = np.argsort(where * span + (when - low), kind="stable")
    return order


def _sorted_unique(keys: Counts) -> Counts:
    """`np.unique(keys)`: sorted, each once."""
    keys = np.sort(keys)
    if len(keys):
        keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))]
    return keys


def _walked_units(when: Counts, where: Counts, change: Counts, free0: Counts, u0: Counts,
              need: Counts, s0: int, d: int, horizon: int) -> tuple[Counts, Counts]:
    """The breakpoints of U_n (time, change of U_n there) of the nodes of the changes
    (when, where, change: asked types only) inside (s_0, horizon), U_n(s_0) - u_n(s_0)
    at s_0 included (`NodeProfile.units_over_runs`).

    Node n's steps are k = 0..K_n from a_0 = s_0, a_k. Step k lies in the run from s iff
    a_k < s + d_i and a_{k+1} > s, so U_n(s) is the least u_n over the steps
    [lo(s), hi(s)] (lo: the last a_k <= s, hi: the last a_k < s + d_i), and it changes
    only at s = a_k (step k - 1 leaves) and s = a_k - d_i + 1 (step k enters; times are
    whole seconds): read there off a sparse table of range minima over every node's
    steps."""
    order = _node_time_order(where, when, s0, horizon)  # node by node, in time order
    when, where, change = when[order], where[order], change[order]
    instant = np.flatnonzero(np.concatenate(
        ([True], (where[1:] != where[:-1]) | (when[1:] != when[:-1]))))
    change = np.add.reduceat(change, instant, axis=0)
    when, where = when[instant], where[instant]
    starts_node = np.concatenate(([True], where[1:] != where[:-1]))
    node_first = np.flatnonzero(starts_node)
    walked = where[node_first]
    total = np.cumsum(change, axis=0)
    before = np.concatenate((np.zeros((1, total.shape[1]), dtype=np.int64), total))
    running_sum = total - before[node_first][np.cumsum(starts_node) - 1]
    u_after = row_min((free0[where] + running_sum) // need)
    # The steps of the walked nodes, node by node: step 0 (a_0 = s_0, u_n(s_0)), then one
    # per change.
    step_u = np.insert(u_after, node_first, u0[walked])
    step_at = np.insert(when, node_first, s0)
    step_node = np.insert(where, node_first, walked)
    # A step of the same u_n as the one before is part of it; a node left with step 0 only
    # keeps U_n = u_n(s_0).
    changed = np.concatenate(([False], (step_node[1:] == step_node[:-1])
                              & (step_u[1:] != step_u[:-1])))
    first_step = np.concatenate(([True], step_node[1:] != step_node[:-1]))
    moving = np.zeros(len(u0), dtype=bool)
    moving[step_node[changed]] = True
    keep = moving[step_node] & (changed | first_step)
    step_u, step_at, step_node = step_u[keep], step_at[keep], step_node[keep]
    changed = changed[keep]
    walked = step_node[~changed]
    if not len(walked):
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    span = horizon + d - s0 + 2  # keys node * span + (time - s_0) sort node by node
    key = step_node * span + (step_at - s0)
    # U_n's breakpoints: s_0 on each walked node, a_k and a_k - d_i + 1 (not before s_0).
    bp_node = np.concatenate((walked, step_node[changed], step_node[changed]))
    bp_at = np.concatenate((np.full(len(walked), s0, dtype=np.int64), step_at[changed],
                            np.maximum(step_at[changed] - d + 1, s0)))
    bp_key = _sorted_unique(bp_node * span + (bp_at - s0))
    bp_node, bp_at = bp_key // span, bp_key % span + s0
    lo = key.searchsorted(bp_key, side="right") - 1
    hi = key.searchsorted(bp_key + d, side="left") - 1
    least = _range_minima(step_u, lo, hi)
    # Each breakpoint's change of U_n: from u_n(s_0) at the first (s_0), then from the one
    # before.
    same = np.concatenate(([False], bp_node[1:] == bp_node[:-1]))
    delta = least - u0[bp_node]
    delta[same] = least[same] - least[:-1][same[1:]]
    return bp_at, delta


def _range_minima(values: Counts, lo: Counts, hi: Counts) -> Counts:
    """min(values[lo[q] : hi[q] + 1]) for each query q (lo <= hi): a sparse table of the minima
    over runs of 2^j values, two overlapping runs per query."""
    length = hi - lo + 1
    level = np.frexp(length.astype(np.float64))[1] - 1  # floor(log2(length))
    least = np.empty(len(lo), dtype=np.int64)
    table = values
    for j in range(int(level.max()) + 1 if len(lo) else 0):
        if j:
            half = 1 << (j - 1)
            table = np.minimum(table[:-half], table[half:])
        ask = np.flatnonzero(level == j)
        if len(ask):
            least[ask] = np.minimum(table[lo[ask]], table[hi[ask] - (1 << j) + 1])
    return least


class _Releases:
    """The running work's releases, sorted by end, and the free amounts after the first k of
    them (shared by every copy of a profile: they never change during a decision)."""

    def __init__(self, base: Counts, ends: Counts, nodes: Counts, amounts: Counts) -> None:
        self.base = base
        self.ends, self.nodes, self.amounts = ends, nodes, amounts
        self._after: OrderedDict[int, Counts] = OrderedDict()

    def free_after(self, k: int) -> Counts:
        """`base` plus the first k releases (read-only)."""
        after = self._after
        kept = after.get(k)
        if kept is not None:
            after.move_to_end(k)
            return kept
        below = max((j for j in after if j <= k), default=0)
        free = (after[below] if below else self.base).copy()
        if k > below:
            np.add.at(free, self.nodes[below:k], self.amounts[below:k])
        free.flags.writeable = False
        after[k] = free
        if len(after) > _KEPT_RELEASE_STATES:
            after.popitem(last=False)
        return free


class NodeProfile:
    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        eligible = np.asarray(problem.eligible, dtype=bool)
        self._eligible = eligible
        shape = (len(problem.node_ids), len(problem.resources))
        now = np.array(problem.free_now.free, dtype=np.int64).reshape(shape)
        now[~eligible] = 0  # nodes that are not up never receive work
        now.flags.writeable = False
        events = problem.release_events()  # eligible nodes only, ends >= 1, sorted
        self._run = _Releases(now, events.ends, events.nodes, events.amounts)
        ends, step_of = np.unique(events.ends, return_inverse=True)
        released = np.zeros((len(ends) + 1, shape[1]), dtype=np.int64)
        np.add.at(released, step_of.reshape(-1) + 1, events.amounts)
        self._times: Counts = np.concatenate(([0], ends)).astype(np.int64)
        self._pooled: Counts = np.cumsum(released, axis=0) + now.sum(axis=0)
        self._steps = len(self._times)  # rows in use; the rest are spare
        # Holds not yet applied to the pooled view: (start, end, amounts taken), applied
        # together when it is next read (thousands of starts at t in a row read none).
        self._pending: list[tuple[int, int, Counts]] = []
        self._releases = self._times.copy()  # the boundaries of the running work
        # The hold rows: [0, _held) in use, [0, _merged) merged (no two rows of one time and
        # node, none all zero).
        self._hold_times: Counts = np.empty(0, dtype=np.int64)
        self._hold_nodes: Counts = np.empty(0, dtype=np.int64)
        self._hold_amounts: Counts = np.empty((0, shape[1]), dtype=np.int64)
        self._held = self._merged = 0
        self._sorted = 0  # rows [0, _sorted) in time order (as `_merge` leaves them)
        self._negative = bool((now < 0).any())  # some node overfull: fit tests scan them all
        self._grid: Counts | None = None  # `_dense()`, until the next change
        # The last fit `earliest` found: (start, d_i, request, free during the run, units per
        # node), dropped whenever an amount changes.
        self._seen: tuple[int, int, Vec, Counts, Counts, int] | None = None
        # A site's rules (None: none, every verb as without them), E_i's node masks by E_i,
        # and each window's nodes as indices.
        self._rules: Eligibility | None = problem.eligibility
        self._masks: dict[frozenset[int], npt.NDArray[np.bool_]] = {}
        self._window_rows: dict[int, Counts] = {}

    @property
    def times(self) -> Counts:
        """Start of each step (a view)."""
        self._flush()
        return self._times[: self._steps]

    @property
    def pooled(self) -> Counts:
        """Free amounts per step and type, summed over nodes (a view): (steps, types)."""
        self._flush()
        return self._pooled[: self._steps]

    @property
    def overfull(self) -> bool:
        """Whether some free amount may be negative (a hold taken without a fit test)."""
        return self._negative

    @property
    def cells(self) -> int:
        """Steps × nodes × types: the size of this profile as a grid."""
        self._flush()
        return self._steps * int(self._run.base.size)

    @property
    def free(self) -> Counts:
        """Free amounts per step, node and type, as a grid: (steps, nodes, types). Built on
        demand, for small profiles (tests, reports): the planner never needs it."""
        return np.stack([self._free_at(int(s)) for s in self.times.tolist()])

    # -- the node-by-node view ---------------------------------------------------------------

    def _holds(self) -> tuple[Counts, Counts, Counts]:
        n = self._held
        return self._hold_times[:n], self._hold_nodes[:n], self._hold_amounts[:n]

    def _rows_between(self, low: int, high: int) -> Counts:
        """Indices of the hold rows of times in (low, high), in row order: a range of the
        rows in time order, the others tested one by one."""
        times, k = self._hold_times, self._sorted
        first = int(times[:k].searchsorted(low, side="right"))
        stop = int(times[:k].searchsorted(high, side="left"))
        tail = times[k : self._held]
        later = np.flatnonzero((tail > low) & (tail < high)) + k
        if first >= stop:
            return later
        return np.concatenate((np.arange(first, stop), later))

    def _free_at(self, when: int, rows: Counts | None = None) -> Counts:
        """Free amounts at `when` (every change at or before it applied), per node of `rows`
        (None: every node); a new array."""
        run = self._run
        released = run.free_after(int(run.ends.searchsorted(when, side="right")))
        free = released.copy() if rows is None else released[rows]
        if rows is None:
            # The rows in time order up to `when` (a view), then the others at or before it.
            k, n = self._sorted, self._held
            upto = int(self._hold_times[:k].searchsorted(when, side="right"))
            if upto:
                add_rows(free, self._hold_nodes[:upto], self._hold_amounts[:upto])
            later = np.flatnonzero(self._hold_times[k:n] <= when) + k
            if len(later):
                add_rows(free, self._hold_nodes[later], self._hold_amounts[later])
            return free
        times, nodes, amounts = self._holds()
        if len(times):
            hit = (times <= when) & self._member(rows)[nodes]
            if hit.any():
                add_rows(free, rows.searchsorted(nodes[hit]), amounts[hit])
        return free

    def _member(self, rows: Counts) -> npt.NDArray[np.bool_]:
        """Whether each node is one of `rows`."""
        member = np.zeros(len(self._eligible), dtype=bool)
        member[rows] = True
        return member

    def _least(self, start: int, end: int, rows: Counts | None = None) -> Counts:
        """Per node of `rows` (sorted; None: every node) and type, the least free amount over
        [start, end) (a new array): off the grid where the profile is small, else from the
        changes."""
        grid = self._dense()
        if grid is None:
            return self._least_from_changes(start, end, rows)
        first, stop = self._steps_of(start, end)
        block = grid[first:stop] if rows is None else grid[first:stop, rows]
        least: Counts = block.min(axis=0)
        return least

    def _least_from_changes(self, start: int, end: int, rows: Counts | None = None) -> Counts:
        """`_least` from the changes alone: the amount at `start`, lowered on the nodes a hold
        starts on inside the run by the lowest running sum of their changes there."""
        free = self._free_at(start, rows)
        times, nodes, amounts = self._holds()
        if not len(times):
            return free
        inside = self._rows_between(start, end)  # the rows inside the run
        taking = inside[row_any_negative(amounts[inside])]
        if rows is not None:
            taking = taking[self._member(rows)[nodes[taking]]]
        if not len(taking):
            return free
        member = np.zeros(len(self._eligible), dtype=bool)  # the nodes walked
        member[nodes[taking]] = True
        run = self._run
        first = int(run.ends.searchsorted(start, side="right"))
        stop = int(run.ends.searchsorted(end, side="left"))
        on = member[run.nodes[first:stop]]
        mine = inside[member[nodes[inside]]]
        when = np.concatenate((run.ends[first:stop][on], times[mine]))
        where = np.concatenate((run.nodes[first:stop][on], nodes[mine]))
        change = np.concatenate((run.amounts[first:stop][on], amounts[mine]))
        order = _node_time_order(where, when, start, end)  # node by node, in time order
        when, where, change = when[order], where[order], change[order]
        # One row per (node, time): the changes of one instant apply together.
        instant = np.flatnonzero(np.concatenate(
            ([True], (where[1:] != where[:-1]) | (when[1:] != when[:-1]))))
        change, where = np.add.reduceat(change, instant, axis=0), where[instant]
        starts_node = np.concatenate(([True], where[1:] != where[:-1]))
        node_first = np.flatnonzero(starts_node)
        # The running sum of each node's changes from the start of the run on.
        total = np.cumsum(change, axis=0)
        before = np.concatenate((np.zeros((1, total.shape[1]), dtype=np.int64), total))
        running_sum = total - before[node_first][np.cumsum(starts_node) - 1]
        lowest = np.minimum(np.minimum.reduceat(running_sum, node_first, axis=0), 0)
        at = where[node_first] if rows is None else rows.searchsorted(where[node_first])
        free[at] += lowest
        return free

    def _push(self, times: Counts, nodes: Counts, amounts: Counts, merge: bool = True) -> None:
        """Append hold rows (merging the rows that cancel now and then, unless the caller may
        drop the new rows again: `merge` False)."""
        n, m = self._held, len(times)
        if n + m > len(self._hold_times):
            size = max(n + m, 2 * len(self._hold_times), 64)
            for name in ("_hold_times", "_hold_nodes", "_hold_amounts"):
                old = getattr(self, name)
                new = np.empty((size, *old.shape[1:]), dtype=np.int64)
                new[:n] = old[:n]
                setattr(self, name, new)
        self._hold_times[n : n + m] = times
        self._hold_nodes[n : n + m] = nodes
        self._hold_amounts[n : n + m] = amounts
        self._held = n + m
        self._grid = None
        if merge and self._held > 2 * self._merged + 256:
            self._merge()

    def _merge(self) -> None:
        """One row per (time, node), rows of no change dropped: the same function."""
        times, nodes, amounts = self._holds()
        order = np.lexsort((nodes, times))
        times, nodes, amounts = times[order], nodes[order], amounts[order]
        first = np.flatnonzero(np.concatenate(
            ([True], (times[1:] != times[:-1]) | (nodes[1:] != nodes[:-1]))))
        amounts = np.add.reduceat(amounts, first, axis=0)
        keep = amounts.any(axis=1)
        times, nodes, amounts = times[first][keep], nodes[first][keep], amounts[keep]
        n = len(times)
        self._hold_times[:n], self._hold_nodes[:n], self._hold_amounts[:n] = times, nodes, amounts
        self._held = self._merged = self._sorted = n

    # -- the pooled view ---------------------------------------------------------------------

    def _steps_of(self, start: int, end: int) -> tuple[int, int]:
        """Indices [first, stop) of the steps that overlap [start, end)."""
        times = self.times
        first = int(times.searchsorted(start, side="right")) - 1
        stop = int(times.searchsorted(end, side="left"))
        return first, max(stop, first + 1)

    def _grow(self, rows: int) -> None:
        """Room for at least `rows` steps (doubling, so that splits cost amortised O(1) rows)."""
        size = max(rows, 2 * len(self._times))
        n = self._steps
        for name in ("_times", "_pooled"):
            old = getattr(self, name)
            new = np.empty((size, *old.shape[1:]), dtype=np.int64)
            new[:n] = old[:n]
            setattr(self, name, new)

    def _flush(self) -> None:
        """Apply the pending holds to the pooled view: every start and end a step boundary,
        as taking them one by one makes."""
        pending = self._pending
        if not pending:
            return
        self._pending = []
        self._grid = None
        if len(pending) <= 4:  # a few: split in place (shifting the later rows once each)
            for start, end, amounts in pending:
                first, stop = self._boundary(start), self._boundary(end)
                self._pooled[first:stop] -= amounts
            return
        n = self._steps
        times = self._times[:n]
        starts = np.fromiter((s for s, _, _ in pending), dtype=np.int64, count=len(pending))
        ends = np.fromiter((e for _, e, _ in pending), dtype=np.int64, count=len(pending))
        bounds = np.union1d(times, np.concatenate((starts, ends)))
        pooled = self._pooled[:n][times.searchsorted(bounds, side="right") - 1]
        change = np.zeros_like(pooled)
        amounts = np.stack([a for _, _, a in pending])
        np.add.at(change, bounds.searchsorted(starts), amounts)
        np.subtract.at(change, bounds.searchsorted(ends), amounts)
        pooled -= np.cumsum(change, axis=0)
        self._times, self._pooled, self._steps = bounds, pooled, len(bounds)

    def _split(self, when: int) -> int:
        """Index of the step that starts exactly at `when`, creating it if needed."""
        self._flush()
        return self._boundary(when)

    def _boundary(self, when: int) -> int:
        """`_split` of the pooled view as it is (no pending hold applied first)."""
        n = self._steps
        i = int(self._times[:n].searchsorted(when, side="right")) - 1
        if self._times[i] == when:
            return i
        self._grid = None
        if n == len(self._times):
            self._grow(n + 1)
        for array in (self._times, self._pooled):
            array[i + 2 : n + 1] = array[i + 1 : n]  # numpy copies overlapping rows safely
            array[i + 1] = array[i]
        self._times[i + 1] = when
        self._steps = n + 1
        return i + 1

    def add_boundaries(self, whens: Iterable[int]) -> None:
        """Make every time in `whens` (>= 0) a step boundary at once; the function stays the same.

        Many reservations placed one after another then split no step, which would shift
        the later rows once per boundary."""
        times = self.times
        new = np.union1d(times, np.fromiter(whens, dtype=np.int64))
        if len(new) == len(times):
            return
        rows = times.searchsorted(new, side="right") - 1
        self._grid = None
        self._pooled = self._pooled[rows]
        self._times = new
        self._steps = len(new)

    def keep_boundaries(self, whens: Iterable[int]) -> None:
        """Drop the step boundaries that are neither in `whens` nor an end of running work.

        Only for boundaries no reservation starts or ends at: each such step equals the one
        before it, so the function stays the same, with the steps it would have had without
        `add_boundaries`."""
        times = self.times
        keep = np.isin(times, np.fromiter(whens, dtype=np.int64)) | np.isin(
            times, self._releases)
        if keep.all():
            return
        self._grid = None
        self._pooled = self._pooled[: self._steps][keep]
        self._times = times[keep]
        self._steps = len(self._times)

    # -- the verbs: what is free during a run, the earliest start that fits, hold, release -----

    def _dense(self) -> Counts | None:
        """Free amounts per step, node and type, where that grid is small (`DENSE_CELLS`):
        what is free now plus every change, summed step by step; None on larger profiles."""
        if self._grid is not None:
            return self._grid
        times = self.times
        run = self._run
        if len(times) * run.base.size > DENSE_CELLS:
            return None
        change = np.zeros((len(times), *run.base.shape), dtype=np.int64)
        np.add.at(change, (times.searchsorted(run.ends, side="right") - 1, run.nodes),
                  run.amounts)
        hold_times, hold_nodes, hold_amounts = self._holds()
        if len(hold_times):
            np.add.at(change, (times.searchsorted(hold_times, side="right") - 1, hold_nodes),
                      hold_amounts)
        grid = np.cumsum(change, axis=0)
        grid += run.base
        self._grid = grid
        return grid

    def free_during(self, start: int, end: int) -> Counts:
        """Per node and type, the least free amount over [start, end): (nodes, types)."""
        return self._least(start, end)

    def free_at(self, when: int) -> Counts:
        """Per node and type, what is free at `when` (a new array)."""
        return self._free_at(when)

    def least_on(self, start: int, end: int, rows: Counts) -> Counts:
        """`free_during(start, end)` on the nodes `rows` (sorted) only: (len(rows), types)."""
        return self._least(start, end, rows)

    def takes_after(self, when: int) -> tuple[Counts, Counts]:
        """(time, node) of each hold row after `when` that lowers a free amount: where and
        when a node's free amount may fall (a promise's start). Without one on it, a node
        never has less free than at `when`."""
        times, nodes, amounts = self._holds()
        lower = (times > when) & row_any_negative(amounts)
        return times[lower], nodes[lower]

    @staticmethod
    def units_fitting(free: Counts, job: Job) -> Counts:
        """Units of job i that fit on each node into `free` (one unit never spans nodes)."""
        req = request_array(job.req)
        asked = np.flatnonzero(req > 0)
        if not len(asked):
            return np.zeros(free.shape[0], dtype=np.int64)
        fit: Counts = free[:, asked[0]] // req[asked[0]]
        for r in asked[1:].tolist():  # type by type: no copy of the asked columns
            np.minimum(fit, free[:, r] // req[r], out=fit)
        return fit

    # -- a site's rules: the nodes job i may use for a run from s -----------------------------

    def usable(self, job: Job, start: int) -> npt.NDArray[np.bool_] | None:
        """The up nodes job i may use for a run from `start`: those of E_i, but the nodes of
        every window that does not admit it and overlaps [start, start + requested_i) (a new
        array); None where the rules leave it every up node."""
        rules = self._rules
        if rules is None:
            return None
        allowed = rules.allowed(job.index)
        end = start + job.at_most
        hit = [w for w in rules.holding(job.index) if w.start < end and w.end > start]
        if allowed is None and not hit:
            return None
        if allowed is None:
            mask = self._eligible.copy()
        else:
            known = self._masks.get(allowed)
            if known is None:
                known = np.zeros(len(self._eligible), dtype=bool)
                known[np.fromiter(allowed, dtype=np.int64, count=len(allowed))] = True
                known &= self._eligible
                self._masks[allowed] = known
            mask = known.copy()
        for w in hit:
            rows = self._window_rows.get(id(w))
            if rows is None:
                rows = self._window_rows[id(w)] = np.fromiter(w.nodes, dtype=np.int64,
                                                              count=len(w.nodes))
            mask[rows] = False
        return mask

    def free_for(self, job: Job, start: int) -> Counts:
        """`free_during(start, start + d_i)`, zero on the nodes job i may not use then
        (`usable`): what it may take (a new array)."""
        free = self.free_during(start, start + job.duration)
        mask = self.usable(job, start)
        if mask is not None:
            free[~mask] = 0
        return free

    def _window_ends(self, job: Job, after: int) -> list[int]:
        """The ends after `after` of the windows that hold nodes from job i."""
        rules = self._rules
        if rules is None:
            return []
        return [w.end for w in rules.holding(job.index) if w.end > after]

    def _earliest_ruled(self, job: Job, should_stop: StopCheck, not_before: int) -> int:
        """`earliest` of a job the rules restrict: the candidates of the pooled view (a
        necessary condition still: the rules only take nodes away) and the ends of the windows
        that hold nodes from it, in time order, each read node by node on its usable nodes."""
        start = first_room(self.times, self.pooled, job.demand(), job.duration, not_before)
        if self._fits_seen(job, start):
            return start
        first = int(self.times.searchsorted(start, side="right"))
        steps: list[int] = []
        if first < self._steps:
            starts, _, _, room = self._pooled_candidates(job, first)
            steps = starts[room].tolist()
        for candidate in sorted(set(steps).union(self._window_ends(job, start))):
            stop_if(should_stop, "conservative reservation")
            if self._fits_seen(job, candidate):
                return candidate
        raise AssertionError("a job that fits an empty system must fit once all ends")

    def earliest(self, job: Job, should_stop: StopCheck = never, not_before: int = 0) -> int:
        """Earliest start s >= `not_before` (relative to t) at which rn_i units of job i fit
        node by node for all of d_i. Raises Stopped when `should_stop()` turns true (once per
        candidate).

        The candidates are what `first_room` gives one after another in the pooled view:
        `not_before`, then every step boundary after it where the pooled view has room over
        the whole run (all found at once); each is then read node by node (`free_during`).
        A job the site's rules restrict: `_earliest_ruled`."""
        if self._rules is not None and self._rules.restricts(job.index):
            return self._earliest_ruled(job, should_stop, not_before)
        duration = job.duration
        stop_if(should_stop, "conservative reservation")
        start = first_room(self.times, self.pooled, job.demand(), duration, not_before)
        if self._fits_seen(job, start):
            return start
        first = int(self.times.searchsorted(start, side="right"))
        if first == self._steps:
            raise AssertionError("a job that fits an empty system must fit once all ends")
        req = request_array(job.req)
        grid = self._dense()
        if grid is not None and bool((req > 0).any()):
            return self._earliest_on_grid(job, first, req, grid, should_stop)
        starts, _, _, room = self._pooled_candidates(job, first)
        candidates = starts[room]
        for start in candidates[:TESTED_ONE_BY_ONE].tolist():
            stop_if(should_stop, "conservative reservation")
            if self._fits_seen(job, start):
                return start
        rest = candidates[TESTED_ONE_BY_ONE:]
        swept = SWEPT_FIRST
        while len(rest) and bool((req > 0).any()):
            # The next `swept` candidates in one sweep: it reads the changes up to the last
            # one's run only, so a job that fits early reads few.
            stop_if(should_stop, "conservative reservation")
            k = self.first_fitting(job, rest[:swept])
            if k < 0:
                rest, swept = rest[swept:], 4 * swept
                continue
            if self._fits_seen(job, int(rest[k])):
                return int(rest[k])
            rest = rest[k:]  # not reached with an exact sweep: one by one, as before
            break
        for start in rest.tolist():
            stop_if(should_stop, "conservative reservation")
            if self._fits_seen(job, start):
                return start
        # Past the last step nothing changes any more: the pooled test was exact there only
        # if nodes can hold the job, which `never_fits` checked before.
        raise AssertionError("a job that fits an empty system must fit once all ends")

    def first_fitting(self, job: Job, candidates: Counts) -> int:
        """Index of the first of `candidates` (sorted starts, >= 0) at which rn_i units of job i
        fit node by node for all of d_i, -1 if none: every candidate at once, in one sweep over
        the changes from the first candidate on (`units_over_runs`)."""
        fitting = self.units_over_runs(job, candidates)
        hit = np.flatnonzero(fitting >= job.units)
        return int(hit[0]) if len(hit) else -1

    def units_over_runs(self, job: Job, candidates: Counts) -> Counts:
        """For each start s of `candidates` (sorted, >= 0), the units of job i that fit node by
        node over [s, s + d_i): sum over nodes n of U_n(s), the least over the run of
        u_n = min_r floor(free_n,r / req_r) (a job asking for no type: zeros).

        From s_0 = candidates[0] on, node n's u_n is a step function with a step at each change
        on it (a release, a hold's start or end) before the last candidate's run ends. A node
        whose only change there raises it (a release, a hold's end) has U_n(s) = u_n(s): it
        adds its rise from the change on. On the other nodes (`_walked_units`) U_n is read at
        its breakpoints. F(s) = sum of U_n(s) is the running sum of those changes, read at each
        candidate: the cost grows with the changes up to the last candidate's run, not with
        nodes × candidates."""
        req = request_array(job.req)
        asked = np.flatnonzero(req > 0)
        if not len(asked):
            return np.zeros(len(candidates), dtype=np.int64)
        need, d = req[asked], job.duration
        s0, horizon = int(candidates[0]), int(candidates[-1]) + d
        free0 = self._free_at(s0)[:, asked]
        u0 = row_min(free0 // need)  # u_n(s_0), every node
        total = int(u0.sum())
        run = self._run
        first = int(run.ends.searchsorted(s0, side="right"))
        stop = int(run.ends.searchsorted(horizon, side="left"))
        times, nodes, amounts = self._holds()
        mine = self._rows_between(s0, horizon)
        when = np.concatenate((run.ends[first:stop], times[mine]))
        if not len(when):
            return np.full(len(candidates), total, dtype=np.int64)
        where = np.concatenate((run.nodes[first:stop], nodes[mine]))
        change = np.concatenate((run.amounts[first:stop][:, asked], amounts[mine][:, asked]))
        # The nodes of one change, a rise: U_n(s) = u_n(s), + rise from the change on.
        walked = np.bincount(where, minlength=len(u0)) > 1
        walked[where[row_any_negative(change)]] = True
        once = ~walked[where]
        rising = where[once]
        at = [when[once]]
        delta = [row_min((free0[rising] + change[once]) // need) - u0[rising]]
        if not once.all():
            more = ~once
            steps_at, steps_delta = _walked_units(when[more], where[more], change[more],
                                                  free0, u0, need, s0, d, horizon)
            at.append(steps_at)
            delta.append(steps_delta)
        # A change at `a` counts for every candidate from the first one >= a on.
        slot = candidates.searchsorted(np.concatenate(at), side="left")
        added = np.bincount(slot, weights=np.concatenate(delta), minlength=len(candidates) + 1)
        summed: Counts = total + np.cumsum(np.rint(added[: len(candidates)]).astype(np.int64))
        return summed

    def _earliest_on_grid(self, job: Job, first: int, req: Counts, free: Counts,
                          should_stop: StopCheck) -> int:
        """`earliest` among the candidates from times[first] on, all tested at once on the
        grid `free` (`_dense`): the units of job i per node and step (floor division is
        monotone, so the least over the steps of a run is the units that fit into its least
        free amounts) summed over nodes; the runs' first and last steps only move forward, so
        their least units per node come from a queue of two stacks (suffix minima in front, a
        running minimum behind), each step read about twice instead of once per candidate
        whose run covers it."""
        n = self._steps
        starts, lows, highs, room = self._pooled_candidates(job, first)
        wanted = [(r, int(req[r])) for r in np.flatnonzero(req > 0).tolist()]
        units = job.units
        # Units of job i per node and step, and their sum over nodes per step (at least the
        # sum over nodes of their least over a run: a run where it falls short anywhere fails
        # node by node too), for the steps [first, cached), a block at a time.
        per_step = np.empty((n - first, free.shape[1]), dtype=np.int64)
        totals = np.empty(n - first + 1, dtype=np.int64)
        cached = first
        front_low = front_high = 0  # suffix minima of the steps [front_low, front_high)
        suffix = per_step[:0]
        behind: Counts | None = None  # least units of the steps [front_high, pushed)
        pushed = 0
        left = room
        while len(left):
            stop_if(should_stop, "conservative reservation")
            upto = min(n, max(int(highs[left[0]]), cached + max(64, cached - first)))
            block = per_step[cached - first : upto - first]
            for r, (column, need) in enumerate(wanted):  # type by type: scalar divisions
                if r == 0:
                    np.floor_divide(free[cached:upto, :, column], need, out=block)
                else:
                    np.minimum(block, free[cached:upto, :, column] // need, out=block)
            totals[cached - first : upto - first] = block.sum(axis=1)
            cached = upto
            at = int(highs[left].searchsorted(cached, side="right"))
            ready, left = left[:at], left[at:]
            bounds = np.empty(2 * len(ready), dtype=np.int64)
            bounds[0::2], bounds[1::2] = lows[ready] - first, highs[ready] - first
            least_total = np.minimum.reduceat(totals[: cached - first + 1], bounds)[0::2]
            for k in ready[least_total >= units].tolist():
                stop_if(should_stop, "conservative reservation")
                low, high = int(lows[k]), int(highs[k])
                if low >= front_high:  # the front is used up: the run's steps become it
                    steps = per_step[low - first : high - first]
                    suffix = np.minimum.accumulate(steps[::-1], axis=0)[::-1]
                    front_low, front_high, behind, pushed = low, high, None, high
                elif high > pushed:
                    more = per_step[pushed - first : high - first].min(axis=0)
                    behind = more if behind is None else np.minimum(behind, more)
                    pushed = high
                least = suffix[low - front_low]
                if behind is not None:
                    least = np.minimum(least, behind)
                if int(least.sum()) >= units and self._fits_seen(job, int(starts[k])):
                    return int(starts[k])
        # Past the last step nothing changes any more: the pooled test was exact there only
        # if nodes can hold the job, which `never_fits` checked before.
        raise AssertionError("a job that fits an empty system must fit once all ends")

    def _fits_seen(self, job: Job, start: int) -> bool:
        """Whether job i fits node by node at `start`; if so, what `place` will read again is
        remembered."""
        free_run = self.free_during(start, start + job.duration)
        if self._rules is not None:
            mask = self.usable(job, start)
            if mask is not None:
                free_run[~mask] = 0
        fit = self.units_fitting(free_run, job)
        if int(fit.sum()) < job.units:
            return False
        self._seen = (start, job.duration, job.req, free_run, fit, job.index)
        return True

    def _pooled_candidates(self, job: Job, first: int) -> tuple[Counts, Counts, Counts, Counts]:
        """The candidates after the first, as `first_room` gives them one after another:
        candidate k starts at times[first + k], its run's steps are [lows[k], highs[k]); and
        `room`, the k whose run the pooled view holds job i's demand over."""
        self._flush()
        n = self._steps
        times, pooled = self._times[:n], self._pooled[:n]
        starts = times[first:].copy()
        lows = np.arange(first, n)
        highs = np.maximum(times.searchsorted(starts + job.duration, side="left"), lows + 1)
        short = ~np.all(pooled[first:] >= np.asarray(job.demand(), dtype=np.int64), axis=1)
        short_before = np.zeros(n - first + 1, dtype=np.int64)
        np.cumsum(short, out=short_before[1:])
        room = np.flatnonzero(short_before[highs - first] == short_before[lows - first])
        return starts, lows, highs, room

    def _pooled_without(self, job: Job, start: int) -> Counts:
        """The pooled view (a copy) with job i's own reservation over [start, start + d_i)
        given back. Makes start and start + d_i step boundaries (no-ops for a held
        reservation, whose ends already are)."""
        first, stop = self._split(start), self._split(start + job.duration)
        pooled = self._pooled[: self._steps].copy()
        pooled[first:stop] += request_array(job.req) * job.units
        return pooled

    def could_start_before(self, job: Job, start: int) -> bool:
        """Whether the pooled view, with job i's own reservation at `start` given back, lets it
        start earlier: a held reservation can move earlier only then (`earliest` >= this)."""
        if start <= 0:
            return False
        pooled = self._pooled_without(job, start)
        return first_room(self.times, pooled, job.demand(), job.duration) < start

    def starts_now_without(self, job: Job, start: int) -> bool:
        """Whether job i fits over [0, d_i) in the pooled view once its own reservation at
        `start` is given back."""
        return room_now(self.times, self._pooled_without(job, start), job.demand(), job.duration)

    def place(self, job: Job, start: int, first_fit: bool = False) -> list[int]:
        """Nodes of job i's units for a run from `start` (one entry per unit), by the pool's
        rule (best fit or first fit) over what stays free for all of d_i; taken here."""
        seen = self._seen
        eligible = self._eligible
        mask = self.usable(job, start) if self._rules is not None else None
        if seen is not None and seen[:3] == (start, job.duration, job.req) and (
                self._rules is None or seen[5] == job.index):
            free, fit = seen[3], seen[4]  # `earliest` just read them
        else:
            free, fit = self.free_during(start, start + job.duration), None
        if mask is not None:
            eligible = mask
            if fit is None:
                free[~mask] = 0
        # FreePool.from_array(free, ...).choose(...), ranked on the arrays (no pool built);
        # without an overfull node, the units per node are `units_fitting`'s.
        nodes = choose_from_array(free, eligible, self.problem.free_now.scale, job.req,
                                  job.units, first_fit, nonnegative=not self._negative,
                                  per_node_units=None if self._negative else fit)
        if nodes is None:
            raise AssertionError("place called where the job does not fit")
        self.take(job, start, nodes, fits=not self._negative)
        return nodes

    def copy(self) -> NodeProfile:
        """An independent profile with the same contents (the problem and releases shared)."""
        other = NodeProfile.__new__(NodeProfile)
        other.__dict__.update(self.__dict__)
        other.restore(self.checkpoint())
        other._sorted = self._sorted  # the same rows
        return other

    def checkpoint(self) -> State:
        """The profile's state, for `restore`."""
        self._flush()
        n, h = self._steps, self._held
        return (self._times[:n].copy(), self._pooled[:n].copy(), self._hold_times[:h].copy(),
                self._hold_nodes[:h].copy(), self._hold_amounts[:h].copy(), self._negative)

    def restore(self, state: State) -> None:
        self._seen = None
        times, pooled, hold_times, hold_nodes, hold_amounts, self._negative = state
        self._pending = []
        self._grid = None
        self._times, self._pooled = times.copy(), pooled.copy()
        self._steps = len(times)
        self._hold_times, self._hold_nodes = hold_times.copy(), hold_nodes.copy()
        self._hold_amounts = hold_amounts.copy()
        self._held = len(hold_times)
        self._merged = min(self._merged, self._held)
        self._sorted = 0

    def fits_at(self, job: Job, start: int) -> bool:
        """Whether rn_i units of job i fit node by node over [start, start + d_i) (on the nodes
        the rules let it use then). If so, `place` at `start` reads the run again from what
        this read (`_fits_seen`)."""
        return self._fits_seen(job, start)

    def _columns(self, job: Job, nodes: list[int]) -> tuple[Counts, Counts]:
        """The distinct nodes of `nodes` and what job i's units take on each: (nodes, types)."""
        columns, counts = node_counts(nodes)
        return columns, counts[:, None] * request_array(job.req)[None, :]

    def _valid(self, job: Job, nodes: list[int]) -> bool:
        """Whether `nodes` names one up node per unit of job i."""
        if len(nodes) != job.units:
            return False
        if not nodes:
            return True
        array = np.asarray(nodes, dtype=np.int64)
        return bool(array.min() >= 0 and array.max() < len(self._eligible)
                    and self._eligible[array].all())

    def fits_on(self, job: Job, start: int, nodes: list[int]) -> bool:
        """Whether job i's units fit on `nodes` (one entry per unit) for a run from `start`."""
        if not self._valid(job, nodes) or not self._allowed_on(job, start, nodes):
            return False
        end = start + job.duration
        if self._negative and not bool(np.all(self._least(start, end) >= 0)):
            return False  # as before: a node overfull during the run fails the test
        columns, need = self._columns(job, nodes)
        return bool(np.all(self._least(start, end, columns) >= need))

    def _allowed_on(self, job: Job, start: int, nodes: list[int]) -> bool:
        """Whether the rules let job i use every node of `nodes` for a run from `start`."""
        if self._rules is None:
            return True
        mask = self.usable(job, start)
        return mask is None or bool(mask[np.asarray(nodes, dtype=np.int64)].all())

    def _hold(self, job: Job, start: int, nodes: list[int], sign: int,
              merge: bool = True) -> tuple[Counts, Counts]:
        """The hold rows of job i's units on `nodes` over [start, start + d_i) (`sign` -1: the
        rows that give it back; `merge`: as `_push`); (distinct nodes, what each takes)."""
        columns, need = self._columns(job, nodes)
        k = len(columns)
        times = np.empty(2 * k, dtype=np.int64)
        times[:k], times[k:] = start, start + job.duration
        self._push(times, np.concatenate((columns, columns)),
                   np.concatenate((-sign * need, sign * need)), merge)
        return columns, need

    def take(self, job: Job, start: int, nodes: list[int], sign: int = 1,
             fits: bool = False) -> None:
        """Hold job i's units on `nodes` over [start, start + d_i) (`sign` -1: give them back;
        `fits`: the caller chose `nodes` where they fit, no node can become overfull)."""
        self._seen = None
        end = start + job.duration
        columns, need = self._hold(job, start, nodes, sign)
        self._pending.append((start, end, sign * need.sum(axis=0)))
        if sign > 0 and not fits and not self._negative:
            self._negative = bool((self._least(start, end, columns) < 0).any())

    def take_all(self, held: list[tuple[int, Job, list[int]]]) -> bool:
        """Take every (start, job i, nodes) of `held` at once if each fits on its nodes after
        the ones before it (`fits_on` then `take`, one by one, would all succeed); otherwise
        change nothing and return False. Every start and end must be a step boundary already
        (`add_boundaries`).

        Amounts only go down, so each fits after the ones before it exactly when no node is
        short at any time once all are taken."""
        if self._negative:
            return False
        if not held:
            return True
        # `_valid` of every reservation at once: one up node per unit.
        units = np.fromiter((len(nodes) for _, _, nodes in held), dtype=np.int64,
                            count=len(held))
        asked = np.fromiter((job.units for _, job, _ in held), dtype=np.int64, count=len(held))
        if not np.array_equal(units, asked):
            return False
        nodes = np.fromiter(chain.from_iterable(ns for _, _, ns in held), dtype=np.int64,
                            count=int(units.sum()))
        if len(nodes) and not (nodes.min() >= 0 and nodes.max() < len(self._eligible)
                               and self._eligible[nodes].all()):
            return False
        if self._rules is not None and not all(
                self._allowed_on(job, s, ns) for s, job, ns in held):
            return False
        times = self.times
        starts = np.fromiter((s for s, _, _ in held), dtype=np.int64, count=len(held))
        ends = starts + np.fromiter((j.duration for _, j, _ in held), dtype=np.int64,
                                    count=len(held))
        first, stop = times.searchsorted(starts), times.searchsorted(ends)
        if not (np.array_equal(times[first], starts)
                and np.array_equal(times[np.minimum(stop, len(times) - 1)], ends)):
            raise AssertionError("take_all needs every start and end as a step boundary")
        before, merged = self._held, self._merged
        # Every unit's rows at once: -req at its start, +req at its end.
        owner = np.repeat(np.arange(len(held)), units)
        req = np.stack([request_array(job.req) for _, job, _ in held])
        per_unit = req[owner]
        self._push(np.concatenate((starts[owner], ends[owner])), np.concatenate((nodes, nodes)),
                   np.concatenate((-per_unit, per_unit)), merge=False)
        touched = np.unique(nodes)
        if len(touched) and bool(
                (self._least(int(starts.min()), int(ends.max()), touched) < 0).any()):
            self._held, self._merged = before, min(merged, before)
            self._sorted = min(self._sorted, before)
            self._grid = None
            return False
        self._seen = None
        # The pooled view: + demand from each start's step, - from its end's step, summed.
        change = np.zeros((len(times) + 1, req.shape[1]), dtype=np.int64)
        demand = req * asked[:, None]
        np.add.at(change, first, demand)
        np.subtract.at(change, stop, demand)
        self._pooled[: self._steps] -= np.cumsum(change[:-1], axis=0)
        return True

    def give_back(self, job: Job, start: int, nodes: list[int]) -> None:
        """Undo `take(job, start, nodes)`."""
        self.take(job, start, nodes, sign=-1)

    def adopt(self, other: NodeProfile) -> None:
        """Take `other`'s contents (a profile of the same problem, e.g. a copy of this one
        changed): the same free amounts at every time as `other`."""
        self.restore(other.checkpoint())
        self._merged = min(other._merged, self._held)
        self._sorted = other._sorted
