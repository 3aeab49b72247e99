"""The node list indexed once: resource types, node positions, capacities, which nodes are up.

What every decision on one node list shares (a session keeps it while the node list stays the
same, server/intake/node_table.py): each `Problem` and each `Occupancy` is indexed by it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from hpcdispatch.snapshot import Node, NodeState

from .free_pool import Vec


@dataclass(slots=True)
class NodeArrays:
    """Per-node-list facts in numpy form, made on first use and kept with the NodeIndex."""

    capacity: npt.NDArray[np.int64] | None = None  # nodes × resource types
    eligible: npt.NDArray[np.bool_] | None = None  # node is up
    up_capacity_groups: dict[Vec, int] | None = None  # distinct capacities of up nodes: count


@dataclass(frozen=True, slots=True)
class NodeIndex:
    """What a Problem needs from the node list alone (shared by every snapshot with it)."""

    resources: tuple[str, ...]  # resource types, sorted
    node_ids: tuple[str, ...]
    position: dict[str, int]  # node id -> index
    capacity: tuple[Vec, ...]
    eligible: tuple[bool, ...]  # node is up
    scale: Vec  # largest capacity per type (best-fit normalisation)
    up_capacity: Vec  # Σ cap over up nodes
    arrays: NodeArrays = field(default_factory=NodeArrays, compare=False, repr=False)

    def capacity_array(self) -> npt.NDArray[np.int64]:
        """cap[n][r] as a (nodes × resource types) array (read-only)."""
        if self.arrays.capacity is None:
            array = np.asarray(self.capacity, dtype=np.int64).reshape(
                len(self.capacity), len(self.resources))
            array.flags.writeable = False
            self.arrays.capacity = array
        return self.arrays.capacity

    def eligible_array(self) -> npt.NDArray[np.bool_]:
        """Node is up, as a boolean array (read-only)."""
        if self.arrays.eligible is None:
            array = np.asarray(self.eligible, dtype=bool).reshape(len(self.eligible))
            array.flags.writeable = False
            self.arrays.eligible = array
        return self.arrays.eligible

    def up_capacity_groups(self) -> dict[Vec, int]:
        """Distinct capacity vectors of up nodes, with how many nodes have each (read-only)."""
        if self.arrays.up_capacity_groups is None:
            groups: dict[Vec, int] = defaultdict(int)
            for cap, ok in zip(self.capacity, self.eligible, strict=True):
                if ok:
                    groups[cap] += 1
            self.arrays.up_capacity_groups = dict(groups)
        return self.arrays.up_capacity_groups


def index_nodes(nodes: Sequence[Node]) -> NodeIndex:
    resources = tuple(sorted({r for n in nodes for r in n.capacity}))
    capacity = tuple(tuple(n.capacity.get(r, 0) for r in resources) for n in nodes)
    eligible = tuple(n.state is NodeState.UP for n in nodes)
    return NodeIndex(
        resources=resources,
        node_ids=tuple(n.id for n in nodes),
        position={n.id: i for i, n in enumerate(nodes)},
        capacity=capacity,
        eligible=eligible,
        scale=tuple(max((c[r] for c in capacity), default=1) or 1 for r in range(len(resources))),
        up_capacity=tuple(
            sum(c[r] for c, ok in zip(capacity, eligible, strict=True) if ok)
            for r in range(len(resources))
        ),
    )
