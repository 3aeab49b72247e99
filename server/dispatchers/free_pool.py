"""Free resources per node at one instant, grouped by identical free vectors.

Large systems have few distinct free vectors (idle nodes, full nodes, a handful of partial
ones), so fit tests and placements work on groups instead of scanning every node.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

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
    """Free amount per resource type on each node that accepts work."""

    def __init__(self, free: Sequence[Vec], eligible: Sequence[bool], scale: Vec) -> None:
        self.free: list[Vec] = list(free)
        self.eligible = list(eligible)
        self.scale = scale  # per-type divisor for the best-fit score (largest node capacity)
        self.groups: dict[Vec, set[int]] = {}
        for n, vec in enumerate(self.free):
            self._add(n, vec)

    def copy(self) -> FreePool:
        other = FreePool.__new__(FreePool)
        other.free = list(self.free)
        other.eligible = self.eligible
        other.scale = self.scale
        other.groups = {vec: set(nodes) for vec, nodes in self.groups.items()}
        return other

    def _add(self, n: int, vec: Vec) -> None:
        if self.eligible[n] and any(vec):
            self.groups.setdefault(vec, set()).add(n)

    def _remove(self, n: int, vec: Vec) -> None:
        group = self.groups.get(vec)
        if group is not None:
            group.discard(n)
            if not group:
                del self.groups[vec]

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
            per_node = sorted((n, k) for _, nodes, k in fitting for n in nodes)
            for n, k in per_node:
                take = min(k, units - len(chosen))
                chosen.extend([n] * take)
                if len(chosen) == units:
                    break
            return chosen
        fitting.sort(key=lambda f: (self.score(f[0]), min(f[1])))
        for _, nodes, k in fitting:
            need = units - len(chosen)
            count = -(-need // k)
            for n in heapq.nsmallest(count, nodes):
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
