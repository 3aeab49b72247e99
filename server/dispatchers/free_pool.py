"""Free resources per node at one instant, grouped by identical free vectors.

Large systems have few distinct free vectors (idle nodes, full nodes, a handful of partial
ones), so fit tests and placements work on groups instead of scanning every node.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

Vec = tuple[int, ...]


def units_per_node(free: Vec, req: Vec) -> int:
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


class FreePool:
    """Free amount per resource type on each node that accepts work.

    `groups` maps each distinct non-zero free vector to its nodes. Each group also keeps a
    min-heap of its nodes (`_heaps`, lazily cleaned: an entry whose node left the group is
    dropped when met), so the lowest-numbered nodes of a group come out without sorting it.
    """

    def __init__(self, free: Sequence[Vec], eligible: Sequence[bool], scale: Vec) -> None:
        self.free: list[Vec] = list(free)
        self.eligible = list(eligible)
        self.scale = scale  # per-type divisor for the best-fit score (largest node capacity)
        members: dict[Vec, list[int]] = {}
        for n, vec in enumerate(self.free):
            if self.eligible[n] and any(vec):
                members.setdefault(vec, []).append(n)
        # Nodes in ascending order already form a heap.
        self._heaps: dict[Vec, list[int]] = members
        self.groups: dict[Vec, set[int]] = {vec: set(nodes) for vec, nodes in members.items()}

    @classmethod
    def from_array(
        cls, free: npt.NDArray[np.int64], eligible: Sequence[bool], scale: Vec
    ) -> FreePool:
        """The pool of `free` (one row per node), grouped with numpy instead of node by node."""
        pool = cls.__new__(cls)
        pool.free = list(map(tuple, free.tolist()))
        pool.eligible = list(eligible)
        pool.scale = scale
        keep = np.flatnonzero(np.asarray(eligible, dtype=bool) & free.any(axis=1))
        pool._heaps = {}
        if len(keep):
            vecs, first, inverse = np.unique(
                free[keep], axis=0, return_index=True, return_inverse=True
            )
            inverse = inverse.reshape(-1)
            by_group = np.argsort(inverse, kind="stable")
            cuts = np.cumsum(np.bincount(inverse, minlength=len(vecs)))[:-1]
            members = np.split(keep[by_group], cuts)
            # Groups in order of their first node, as adding node by node would make them.
            for g in np.argsort(first, kind="stable").tolist():
                pool._heaps[tuple(vecs[g].tolist())] = members[g].tolist()
        pool.groups = {vec: set(nodes) for vec, nodes in pool._heaps.items()}
        return pool

    def copy(self) -> FreePool:
        other = FreePool.__new__(FreePool)
        other.free = list(self.free)
        other.eligible = self.eligible
        other.scale = self.scale
        other.groups = {vec: set(nodes) for vec, nodes in self.groups.items()}
        other._heaps = {vec: list(heap) for vec, heap in self._heaps.items()}
        return other

    def _add(self, n: int, vec: Vec) -> None:
        if self.eligible[n] and any(vec):
            group = self.groups.get(vec)
            if group is None:
                self.groups[vec] = {n}
                self._heaps[vec] = [n]
                return
            group.add(n)
            heap = self._heaps[vec]
            if len(heap) > 2 * len(group) + 16:  # mostly stale entries: rebuild
                heap[:] = sorted(group)
            else:
                heapq.heappush(heap, n)

    def _remove(self, n: int, vec: Vec) -> None:
        group = self.groups.get(vec)
        if group is not None:
            group.discard(n)
            if not group:
                del self.groups[vec]
                del self._heaps[vec]

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
        self._remove(n, self.free[n])
        self.free[n] = vec
        self._add(n, vec)

    def take(self, n: int, amounts: Vec, times: int = 1) -> None:
        self.set(n, tuple(f - a * times for f, a in zip(self.free[n], amounts, strict=True)))

    def give(self, n: int, amounts: Vec) -> None:
        self.set(n, tuple(f + a for f, a in zip(self.free[n], amounts, strict=True)))

    def units_fit(self, req: Vec, limit: int) -> int:
        """Units of `req` that fit now, counting at most up to `limit`."""
        total = 0
        for vec, nodes in self.groups.items():
            k = units_per_node(vec, req)
            if k:
                total += k * len(nodes)
                if total >= limit:
                    return total
        return total

    def score(self, vec: Vec) -> float:
        return sum(v / s for v, s in zip(vec, self.scale, strict=True) if s)

    def choose(self, req: Vec, units: int, first_fit: bool = False) -> list[int] | None:
        """Nodes for `units` units of `req` (one entry per unit), or None; nothing is taken.

        Best fit fills the node with the least free resources first (the authors' rule,
        scores normalised per resource type); first fit takes nodes in snapshot order.
        """
        fitting = [(vec, nodes, units_per_node(vec, req)) for vec, nodes in self.groups.items()]
        fitting = [f for f in fitting if f[2] > 0]
        if sum(k * len(nodes) for _, nodes, k in fitting) < units:
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
        fitting.sort(key=lambda f: (self.score(f[0]), self.first(f[0])))
        for vec, _, k in fitting:
            need = units - len(chosen)
            count = -(-need // k)
            for n in self.smallest(vec, count):
                chosen.extend([n] * min(k, units - len(chosen)))
            if len(chosen) == units:
                break
        return chosen

    def place(self, req: Vec, units: int, first_fit: bool = False) -> list[int] | None:
        """Choose nodes as `choose` does and take the resources; None leaves the pool as is."""
        chosen = self.choose(req, units, first_fit)
        if chosen is not None:
            self.take_all(chosen, req)
        return chosen

    def take_all(self, nodes: Iterable[int], req: Vec) -> None:
        counts: dict[int, int] = {}
        for n in nodes:
            counts[n] = counts.get(n, 0) + 1
        for n, c in counts.items():
            self.take(n, req, c)
