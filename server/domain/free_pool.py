"""Free resources per node at one instant, grouped by identical free vectors.

Large systems have few distinct free vectors (idle nodes, full nodes, a handful of partial
ones), so fit tests and placements work on groups instead of scanning every node.

Copies are cheap: a copy shares each group's node set and heap with the pool it came from until
one of the two changes that group (copy on write), so copying a pool of 100,000 nodes costs the
list of free vectors and a few dict entries, not 100,000 set entries.
"""

from __future__ import annotations

import bisect
import heapq
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache

import numpy as np
import numpy.typing as npt

Vec = tuple[int, ...]
Members = set[int]  # the nodes of one group

# Largest number of distinct (free vector, request) pairs whose unit count is remembered.
_FIT_CACHE = 1 << 16
# Request vectors whose fitting groups a pool keeps up to date (each costs a little at every
# group that appears or disappears).
FITS_KEPT = 64
# From this many nodes that hold a unit, best fit in `choose_from_array` ranks only the few it
# can reach (`_best_fit_few`), not all of them.
SELECTED_FROM = 256


def count_units(free: Vec, req: Vec) -> int:
    """How many units of per-unit request `req` fit into `free` (one unit never spans nodes)."""
    fit = -1
    for have, need in zip(free, req, strict=True):
        if need > 0:
            k = have // need
            if fit < 0 or k < fit:
                fit = k
                if fit == 0:
                    return 0
    return fit if fit >= 0 else 0


# count_units, remembered: the same few free vectors meet the same few requests all the time.
units_per_node: Callable[[Vec, Vec], int] = lru_cache(maxsize=_FIT_CACHE)(count_units)


@lru_cache(maxsize=_FIT_CACHE)
def _minus(free: Vec, amounts: Vec, times: int) -> Vec:
    """`free` less `times` × `amounts` (remembered: placements repeat the same few vectors)."""
    return tuple([f - a * times for f, a in zip(free, amounts, strict=True)])


minus = _minus  # for the planning modules that keep free vectors of their own


class NodeMask:
    """The nodes one job may be placed on: those of `allowed` (None: every node) but those of
    `excluded` (a site's rules: partitions, features, unavailability windows)."""

    __slots__ = ("allowed", "excluded")

    def __init__(self, allowed: frozenset[int] | None = None,
                 excluded: frozenset[int] = frozenset()) -> None:
        self.allowed = allowed
        self.excluded = excluded

    def __contains__(self, n: int) -> bool:
        return (self.allowed is None or n in self.allowed) and n not in self.excluded

    def of(self, nodes: set[int]) -> set[int]:
        """The members of `nodes` the mask allows (a new set)."""
        kept = nodes & self.allowed if self.allowed is not None else set(nodes)
        if self.excluded:
            kept -= self.excluded
        return kept


class FreePool:
    """Free amount per resource type on each node that accepts work.

    `groups` maps each distinct non-zero free vector to its nodes. Each group also keeps a
    min-heap of its nodes (`_heaps`, lazily cleaned: an entry whose node left the group is
    dropped when met), so the lowest-numbered nodes of a group come out without sorting it.
    A group named in `_shared` holds a set and heap another pool may hold too: they are copied
    before this pool changes them. (Dropping stale heap entries needs no copy: a shared heap
    goes with a shared set, so an entry is stale for both pools or for neither.)
    `_by_score` lists the groups as (best-fit score, vector), sorted. `_fits` keeps, for up to
    FITS_KEPT request vectors, the groups that hold at least one unit of it (score order, with
    the units per node), updated as groups appear and disappear.
    """

    __slots__ = (
        "_by_score",
        "_fits",
        "_heaps",
        "_scores",
        "_shared",
        "eligible",
        "free",
        "groups",
        "scale",
    )

    def __init__(self, free: Sequence[Vec], eligible: Sequence[bool], scale: Vec) -> None:
        self.free: list[Vec] = list(free)
        self.eligible: Sequence[bool] = list(eligible)
        self.scale = scale  # per-type divisor for the best-fit score (largest node capacity)
        members: dict[Vec, list[int]] = {}
        for n, vec in enumerate(self.free):
            if self.eligible[n] and any(vec):
                members.setdefault(vec, []).append(n)
        # Nodes in ascending order already form a heap.
        self._heaps: dict[Vec, list[int]] = members
        self.groups: dict[Vec, set[int]] = {vec: set(nodes) for vec, nodes in members.items()}
        self._shared: set[Vec] = set()
        self._scores: dict[Vec, float] = {}
        self._by_score: list[tuple[float, Vec]] = sorted(
            (self.score(vec), vec) for vec in self.groups)
        self._fits: dict[Vec, list[tuple[float, Vec, int]]] = {}

    @classmethod
    def from_array(
        cls, free: npt.NDArray[np.int64], eligible: Sequence[bool], scale: Vec
    ) -> FreePool:
        """The pool of `free` (one row per node), grouped with numpy instead of node by node.

        Nodes with the same free vector share one tuple, built once per distinct vector.
        """
        pool = cls.__new__(cls)
        vecs, inverse = _distinct_rows(free)
        tuples = [tuple(v) for v in vecs.tolist()]
        pool.free = list(map(tuples.__getitem__, inverse.tolist()))
        pool.eligible = list(eligible)
        pool.scale = scale
        pool._shared = set()
        pool._scores = {}
        keep = np.flatnonzero(np.asarray(eligible, dtype=bool) & free.any(axis=1))
        pool._heaps = {}
        if len(keep):
            kept_groups = inverse[keep]
            by_group = np.argsort(kept_groups, kind="stable")
            counts = np.bincount(kept_groups, minlength=len(vecs))
            members = np.split(keep[by_group], np.cumsum(counts)[:-1])
            present = np.flatnonzero(counts)
            first = np.asarray([members[g][0] for g in present.tolist()], dtype=np.int64)
            # Groups in order of their first node, as adding node by node would make them.
            for g in present[np.argsort(first, kind="stable")].tolist():
                pool._heaps[tuples[g]] = members[g].tolist()
        pool.groups = {vec: set(nodes) for vec, nodes in pool._heaps.items()}
        pool._by_score = sorted((pool.score(vec), vec) for vec in pool.groups)
        pool._fits = {}
        return pool

    def copy(self) -> FreePool:
        """An independent pool with the same contents (groups shared until either changes)."""
        other = FreePool.__new__(FreePool)
        other.free = list(self.free)
        other.eligible = self.eligible
        other.scale = self.scale
        other.groups = dict(self.groups)
        other._heaps = dict(self._heaps)
        self._shared = set(self.groups)
        other._shared = set(self.groups)
        other._scores = self._scores  # a function of the vector and the shared scale
        other._by_score = list(self._by_score)
        other._fits = {req: list(fits) for req, fits in self._fits.items()}
        return other

    def deep_copy(self) -> FreePool:
        """A pool that shares nothing changeable with this one (every group's set and heap,
        the score cache, the eligibility list its own): for code that may change a pool in
        place, not through its methods (a plugin, dispatchers/guard.py). It costs a set entry
        per node with free resources, where `copy` costs none."""
        other = FreePool.__new__(FreePool)
        other.free = list(self.free)
        other.eligible = list(self.eligible)
        other.scale = self.scale
        other.groups = {vec: set(nodes) for vec, nodes in self.groups.items()}
        other._heaps = {vec: list(heap) for vec, heap in self._heaps.items()}
        other._shared = set()
        other._scores = dict(self._scores)
        other._by_score = list(self._by_score)
        other._fits = {req: list(fits) for req, fits in self._fits.items()}
        return other

    def in_node_order(self) -> FreePool:
        """A copy whose groups are listed by their lowest-numbered node, as `from_array` lists
        them (a pool changed node by node lists a group where it first appeared)."""
        other = self.copy()
        order = sorted(self.groups, key=self.first)
        other.groups = {vec: other.groups[vec] for vec in order}
        other._heaps = {vec: other._heaps[vec] for vec in order}
        return other

    def _own(self, vec: Vec) -> None:
        """Make group `vec`'s set and heap this pool's alone before changing them."""
        self.groups[vec] = set(self.groups[vec])
        self._heaps[vec] = list(self._heaps[vec])
        self._shared.discard(vec)

    def _new_group(self, n: int, vec: Vec) -> None:
        self.groups[vec] = {n}
        self._heaps[vec] = [n]
        entry = (self.score(vec), vec)
        bisect.insort(self._by_score, entry)
        for req, fits in self._fits.items():
            k = units_per_node(vec, req)
            if k:
                bisect.insort(fits, (entry[0], vec, k))

    def _drop_group(self, vec: Vec) -> None:
        del self.groups[vec]
        del self._heaps[vec]
        self._shared.discard(vec)
        entry = (self.score(vec), vec)
        del self._by_score[bisect.bisect_left(self._by_score, entry)]
        for fits in self._fits.values():
            at = bisect.bisect_left(fits, entry)
            if at < len(fits) and fits[at][1] == vec:
                del fits[at]

    def first(self, vec: Vec) -> int:
        """The lowest-numbered node of group `vec`."""
        group, heap = self.groups[vec], self._heaps[vec]
        while heap[0] not in group:
            heapq.heappop(heap)
        return heap[0]

    def smallest(self, vec: Vec, count: int) -> list[int]:
        """The `count` lowest-numbered nodes of group `vec` (all of them if fewer), ascending."""
        group, heap = self.groups[vec], self._heaps[vec]
        if count >= len(group):
            return sorted(group)
        if count == 1:
            return [self.first(vec)]
        out: list[int] = []
        while len(out) < count:
            n = heapq.heappop(heap)
            # Stale (the node left the group) or a duplicate (it left and came back).
            if n in group and (not out or out[-1] != n):
                out.append(n)
        for n in out:
            heapq.heappush(heap, n)
        return out

    def set(self, n: int, vec: Vec) -> None:
        """Node n has `vec` free from now on (it moves to that vector's group)."""
        groups = self.groups
        shared = self._shared
        old = self.free[n]
        group = groups.get(old)
        if group is not None and n in group:  # leave the old group
            if len(group) == 1:
                self._drop_group(old)
            else:
                if old in shared:
                    self._own(old)
                    group = groups[old]
                group.discard(n)
        self.free[n] = vec
        if not self.eligible[n] or not any(vec):
            return
        group = groups.get(vec)
        if group is None:
            self._new_group(n, vec)
            return
        if vec in shared:
            self._own(vec)
            group = groups[vec]
        group.add(n)
        heap = self._heaps[vec]
        if len(heap) > 2 * len(group) + 16:  # mostly stale entries: rebuild
            heap[:] = sorted(group)
        else:
            heapq.heappush(heap, n)

    def take(self, n: int, amounts: Vec, times: int = 1) -> None:
        self.set(n, _minus(self.free[n], amounts, times))

    def give(self, n: int, amounts: Vec) -> None:
        self.set(n, _minus(self.free[n], amounts, -1))

    def units_fit(self, req: Vec, limit: int) -> int:
        """Units of `req` that fit now, counting at most up to `limit`."""
        total = 0
        groups = self.groups
        fits = self._fits.get(req)
        for _, vec, k in fits if fits is not None else self.fitting(req):
            total += k * len(groups[vec])
            if total >= limit:
                return total
        return total

    def fitting(self, req: Vec) -> list[tuple[float, Vec, int]]:
        """The groups that hold at least one unit of `req`: (score, vector, units per node),
        lowest score first (read-only)."""
        fits = self._fits.get(req)
        if fits is not None:
            return fits
        fits = []
        for score, vec in self._by_score:
            k = units_per_node(vec, req)
            if k:
                fits.append((score, vec, k))
        if len(self._fits) < FITS_KEPT:
            self._fits[req] = fits
        return fits

    def score(self, vec: Vec) -> float:
        """Best-fit score: the free amounts, each divided by its type's scale, summed."""
        value = self._scores.get(vec)
        if value is None:
            value = self._scores[vec] = sum(
                v / s for v, s in zip(vec, self.scale, strict=True) if s
            )
        return value

    def choose(self, req: Vec, units: int, first_fit: bool = False,
               mask: NodeMask | None = None) -> list[int] | None:
        """Nodes for `units` units of `req` (one entry per unit), or None; nothing is taken.

        Best fit fills the node with the least free resources first (the authors' rule,
        scores normalised per resource type); first fit takes nodes in snapshot order. With
        `mask`, only its nodes are chosen, by the same rules among them.
        """
        if mask is not None:
            return self._choose_masked(req, units, first_fit, mask)
        if not first_fit:
            best = self._best_fit(req, units)
            if best is not None:
                return best
        fitting = []
        total = 0
        for vec, nodes in self.groups.items():
            k = units_per_node(vec, req)
            if k:
                fitting.append((vec, nodes, k))
                total += k * len(nodes)
        if total < units:
            return None
        chosen: list[int] = []
        if first_fit:
            # Each node holds at least one unit: only a group's `units` first nodes may be used.
            per_node = sorted((n, k) for vec, _, k in fitting for n in self.smallest(vec, units))
            for n, k in per_node:
                take = min(k, units - len(chosen))
                chosen.extend([n] * take)
                if len(chosen) == units:
                    break
            return chosen
        if len(fitting) > 1:
            group = self._best_group(fitting)
            if group[2] * len(group[1]) >= units:  # the usual case: one group is enough
                fitting = [group]
            else:
                fitting.sort(key=lambda f: (self.score(f[0]), self.first(f[0])))
        for vec, _, k in fitting:
            need = units - len(chosen)
            count = -(-need // k)
            for n in self.smallest(vec, count):
                chosen.extend([n] * min(k, units - len(chosen)))
            if len(chosen) == units:
                break
        return chosen

    def _choose_masked(self, req: Vec, units: int, first_fit: bool,
                       mask: NodeMask) -> list[int] | None:
        """`choose` among the nodes of `mask`: each group cut to them (costs the groups'
        sizes), then first fit by node, or best fit by (score, lowest node of the cut group)."""
        fitting: list[tuple[Vec, Members, int]] = []
        total = 0
        for vec, nodes in self.groups.items():
            k = units_per_node(vec, req)
            if k:
                members = mask.of(nodes)
                if members:
                    fitting.append((vec, members, k))
                    total += k * len(members)
        if total < units:
            return None
        chosen: list[int] = []
        if first_fit:
            per_node = sorted((n, k) for _, members, k in fitting
                              for n in heapq.nsmallest(units, members))
            for n, k in per_node:
                chosen.extend([n] * min(k, units - len(chosen)))
                if len(chosen) == units:
                    break
            return chosen
        fitting.sort(key=lambda f: (self.score(f[0]), min(f[1])))
        for _, members, k in fitting:
            need = units - len(chosen)
            for n in heapq.nsmallest(-(-need // k), members):
                chosen.extend([n] * min(k, units - len(chosen)))
            if len(chosen) == units:
                break
        return chosen

    def _best_fit(self, req: Vec, units: int) -> list[int] | None:
        """Best fit's choice when one group holds all `units` (None: ask `choose`'s full
        search)."""
        best = self._best_single_group(req, units)
        if best is None:
            return None
        _, vec, k = best
        return _unit_nodes(self.smallest(vec, -(-units // k)), k, units)

    def _best_single_group(self, req: Vec, units: int) -> tuple[float, Vec, int] | None:
        """The entry of `fitting(req)` whose group best fit fills first (lowest score, ties to
        the lowest first node), when that group holds all `units` (None otherwise)."""
        fits = self._fits.get(req)
        if fits is None:
            fits = self.fitting(req)
        if not fits:
            return None
        best = fits[0]
        if len(fits) > 1 and fits[1][0] == best[0]:
            best = min((f for f in fits if f[0] == best[0]), key=lambda f: self.first(f[1]))
        if best[2] * len(self.groups[best[1]]) < units:
            return None
        return best

    def _best_group(self, fitting: list[tuple[Vec, Members, int]]) -> tuple[Vec, Members, int]:
        """The first of `fitting` in best-fit order: lowest score, then lowest first node."""
        score = self.score
        low = min(score(f[0]) for f in fitting)
        tied = [f for f in fitting if score(f[0]) == low]
        return tied[0] if len(tied) == 1 else min(tied, key=lambda f: self.first(f[0]))

    def place(self, req: Vec, units: int, first_fit: bool = False,
              mask: NodeMask | None = None) -> list[int] | None:
        """Choose nodes as `choose` does and take the resources; None leaves the pool as is."""
        if mask is not None:
            chosen = self._choose_masked(req, units, first_fit, mask)
            if chosen is not None:
                self.take_all(chosen, req)
            return chosen
        if not first_fit:
            best = self._best_single_group(req, units)
            if best is not None:
                return self._take_from_group(best[1], best[2], req, units)
        chosen = self.choose(req, units, first_fit)
        if chosen is not None:
            self.take_all(chosen, req)
        return chosen

    def _take_from_group(self, vec: Vec, k: int, req: Vec, units: int) -> list[int]:
        """Take `units` units of `req` from the lowest-numbered nodes of group `vec`, `k` per
        node (the last one may get fewer): what `take_all` does with best fit's choice, the
        nodes moved together."""
        count = -(-units // k)
        group = self.groups[vec]
        if count >= len(group):
            nodes = sorted(group)
            self._drop_group(vec)
        else:
            if vec in self._shared:
                self._own(vec)
                group = self.groups[vec]
            # The `count` lowest-numbered nodes, off the heap for good (they leave the group).
            heap, nodes = self._heaps[vec], []
            for _ in range(count):
                n = heapq.heappop(heap)
                while n not in group:  # stale, or a duplicate of a node taken just now
                    n = heapq.heappop(heap)
                group.remove(n)
                nodes.append(n)
        free = self.free
        full = units // k  # nodes that get k units (all but maybe the last)
        if full == count:
            after = _minus(vec, req, k)
            for n in nodes:
                free[n] = after
            self._join(nodes, after)
        else:
            if full:
                after = _minus(vec, req, k)
                for n in nodes[:full]:
                    free[n] = after
                self._join(nodes[:full], after)
            last = nodes[-1]
            free[last] = after = _minus(vec, req, units - full * k)
            self._join([last], after)
        return nodes if k == 1 else _unit_nodes(nodes, k, units)

    def _join(self, nodes: list[int], vec: Vec) -> None:
        """Nodes (eligible, in no group, ascending) join group `vec`: what `set` does for each."""
        if not any(vec):
            return
        group = self.groups.get(vec)
        if group is None:
            self._new_group(nodes[0], vec)
            nodes = nodes[1:]
            if not nodes:
                return
            group = self.groups[vec]
        elif vec in self._shared:
            self._own(vec)
            group = self.groups[vec]
        group.update(nodes)
        heap = self._heaps[vec]
        if len(heap) + len(nodes) > 2 * len(group) + 16:  # mostly stale entries: rebuild
            heap[:] = sorted(group)
        else:
            for n in nodes:
                heapq.heappush(heap, n)

    def take_all(self, nodes: Iterable[int], req: Vec) -> None:
        free = self.free
        for n, c in Counter(nodes).items():
            self.set(n, _minus(free[n], req, c))


def _unit_nodes(nodes: list[int], k: int, units: int) -> list[int]:
    """One entry per unit: `k` units on each of `nodes` in turn until `units` are placed."""
    if k == 1:
        return nodes[:units]
    chosen: list[int] = []
    for n in nodes:
        chosen.extend([n] * min(k, units - len(chosen)))
    return chosen


def _distinct_rows(
    rows: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The distinct rows of `rows` and, for each row, the index of its distinct row.

    Rows are packed into one integer key when their value ranges allow it (a sort of integers
    instead of a sort of rows); otherwise compared as bytes.
    """
    count, width = rows.shape
    if count == 0:
        return rows.reshape(0, width), np.zeros(0, dtype=np.int64)
    low = rows.min(axis=0)
    span = rows.max(axis=0) - low + 1
    if width and int(np.prod(span.astype(np.float64))) < 2**62:
        key = np.zeros(count, dtype=np.int64)
        for r in range(width):
            key = key * int(span[r]) + (rows[:, r] - low[r])
        _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    else:
        raw = np.ascontiguousarray(rows).view(np.dtype((np.void, 8 * width))).reshape(-1)
        _, first, inverse = np.unique(raw, return_index=True, return_inverse=True)
    return rows[first], inverse.reshape(-1).astype(np.int64, copy=False)


def units_per_row(free: npt.NDArray[np.int64], req: Vec) -> npt.NDArray[np.int64]:
    """`count_units(row, req)` of every row of `free` (nodes × types), as numpy.

    The same arithmetic type by type, including on a row with a negative amount (an overfull
    node): a negative count is replaced by the next type's, and a count of 0 is final."""
    fit = np.full(free.shape[0], -1, dtype=np.int64)
    zero = np.zeros(free.shape[0], dtype=bool)
    for r, need in enumerate(req):
        if need > 0:
            k = free[:, r] // need
            update = ~zero & ((fit < 0) | (k < fit))
            fit = np.where(update, k, fit)
            zero |= update & (k == 0)
    result: npt.NDArray[np.int64] = np.where(zero | (fit < 0), 0, fit)
    return result


def choose_from_array(
    free: npt.NDArray[np.int64], eligible: npt.NDArray[np.bool_], scale: Vec, req: Vec,
    units: int, first_fit: bool = False, nonnegative: bool = False,
    per_node_units: npt.NDArray[np.int64] | None = None,
) -> list[int] | None:
    """`FreePool.from_array(free, eligible, scale).choose(req, units, first_fit)`, without
    building the pool: the nodes are ranked on the arrays. `nonnegative`: the caller knows no
    amount of `free` is negative (units per node are then a plain minimum over the types);
    `per_node_units`: that minimum, when the caller has it already.

    `choose` walks the nodes that hold a unit, each giving min(k, units left) units (k = units
    per node), in node order (first fit) or group by group (best fit): by the group's score,
    then its lowest node, and within a group by node. A node's group is its free vector, so
    best fit's walk is the nodes sorted by (score of their vector, lowest node holding that
    vector, node): by (score, node) where no two vectors of one score hold a unit. Scores
    are `FreePool.score`'s: the same floats, so the same ties.
    """
    k = _units_per_node(free, req, nonnegative, per_node_units)
    fitting = ((k > 0) & eligible).nonzero()[0]
    per_node = k[fitting]
    if int(per_node.sum()) < units:
        return None
    if units <= 0:
        return []
    if not first_fit and len(fitting) > 1:
        if len(fitting) > SELECTED_FROM and units < len(fitting):
            fitting, per_node = _best_fit_few(free, fitting, per_node, scale, units)
        order = _best_fit_order(free[fitting], fitting, scale)
        fitting, per_node = fitting[order], per_node[order]
    taken = np.cumsum(per_node)
    last = int(np.searchsorted(taken, units))  # the node that gives the last unit
    counts = per_node[: last + 1].copy()
    counts[last] -= int(taken[last]) - units
    chosen: list[int] = np.repeat(fitting[: last + 1], counts).tolist()
    return chosen


def _units_per_node(free: npt.NDArray[np.int64], req: Vec, nonnegative: bool,
                    per_node_units: npt.NDArray[np.int64] | None) -> npt.NDArray[np.int64]:
    """Units of `req` each row of `free` holds (`choose_from_array`'s shortcuts)."""
    asked = [r for r, q in enumerate(req) if q > 0]
    if nonnegative and per_node_units is not None:
        return per_node_units
    if nonnegative and len(asked) == 1:
        return free[:, asked[0]] // req[asked[0]]
    if nonnegative and asked:
        return (free[:, asked] // np.asarray([req[r] for r in asked], dtype=np.int64)).min(axis=1)
    return units_per_row(free, req)


def _best_fit_score(rows: npt.NDArray[np.int64], scale: Vec) -> npt.NDArray[np.float64] | None:
    """The score `_best_fit_order` ranks `rows` by first; None where it ranks by groups."""
    terms = [(r, s) for r, s in enumerate(scale) if s]
    if rows.shape[1] == 1 and len(terms) == 1:
        return rows[:, 0].astype(np.float64)
    if not 1 <= len(terms) <= 2:
        return None
    score: npt.NDArray[np.float64] = rows[:, terms[0][0]] / terms[0][1]
    if len(terms) == 2:
        score = score + rows[:, terms[1][0]] / terms[1][1]
    return score


def _best_fit_few(free: npt.NDArray[np.int64], fitting: npt.NDArray[np.int64],
                  per_node: npt.NDArray[np.int64], scale: Vec, units: int
                  ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The `fitting` nodes (and their units) best fit can reach for `units` units: every
    node gives one at least, so the first `units` nodes of its order do; they are among those
    scoring at most the `units`-th least score, a set that holds whole groups (one vector, one
    score) and that best fit orders as it orders them among all (by score first)."""
    score = _best_fit_score(free[fitting], scale)
    if score is None:
        return fitting, per_node
    kth = np.partition(score, units - 1)[units - 1]
    few = np.flatnonzero(score <= kth)
    return fitting[few], per_node[few]


def _best_fit_order(rows: npt.NDArray[np.int64], fitting: npt.NDArray[np.int64],
                    scale: Vec) -> npt.NDArray[np.int64]:
    """The order best fit walks the `fitting` nodes (free amounts `rows`) in: by the score of
    their vector, the lowest node holding that vector, then node."""
    terms = [(r, s) for r, s in enumerate(scale) if s]
    if rows.shape[1] == 1 and len(terms) == 1:
        # One type: the score grows with the amount, and one amount is one vector.
        return np.argsort(rows[:, 0], kind="stable")
    if not 1 <= len(terms) <= 2:
        return _by_group(rows, fitting, scale)
    # The score in numpy: one or two terms add up to the same float however `sum` adds (more
    # terms might not, where Python's sum compensates rounding).
    score = rows[:, terms[0][0]] / terms[0][1]
    if len(terms) == 2:
        score = score + rows[:, terms[1][0]] / terms[1][1]
    order = np.argsort(score, kind="stable")  # by score, then node
    ranked = score[order]
    tied = ranked[1:] == ranked[:-1]
    if tied.any():
        sorted_rows = rows[order]
        if (tied & (sorted_rows[1:] != sorted_rows[:-1]).any(axis=1)).any():
            # Two vectors of one score: their groups go by their lowest node.
            return _by_group(rows, fitting, scale)
    return order


def _by_group(
    rows: npt.NDArray[np.int64], nodes: npt.NDArray[np.int64], scale: Vec
) -> npt.NDArray[np.int64]:
    """Order of `nodes` (ascending, with free vectors `rows`) by (score of the vector, lowest
    node with that vector, node), scores computed as `FreePool.score` computes them."""
    vecs, group = _distinct_rows(rows)
    lowest = np.full(len(vecs), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(lowest, group, nodes)
    scores = [sum(v / s for v, s in zip(vec, scale, strict=True) if s) for vec in vecs.tolist()]
    rank = np.empty(len(vecs), dtype=np.int64)
    rank[sorted(range(len(vecs)), key=lambda g: (scores[g], int(lowest[g])))] = np.arange(
        len(vecs), dtype=np.int64)
    order: npt.NDArray[np.int64] = np.argsort(rank[group], kind="stable")
    return order
