"""A solution of a CP dispatcher's model: relative starts, and nodes for the jobs at t."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Solution:
    starts: dict[int, int]  # job index -> start relative to t
    nodes: dict[int, list[int]] = field(default_factory=dict)  # jobs at t -> unit nodes
    # Node-level models only: job index -> node -> units, for every job (now and later).
    counts: dict[int, dict[int, int]] = field(default_factory=dict)

    def placed_now(self) -> dict[int, list[int]]:
        """The unit nodes of the jobs this solution starts at t."""
        return {i: nodes for i, nodes in self.nodes.items() if self.starts[i] == 0}
