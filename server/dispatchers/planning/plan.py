"""A plan of the CP dispatchers: when each job starts, and where the jobs starting at t go.

Every stage speaks in plans: the list schedules (the heuristic), the solver's solutions read
back from a model, the work-conserving pass, and the decision made from the chosen one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...domain.free_pool import FreePool
    from .protected_room import ProtectedRoom


@dataclass(slots=True)
class Plan:
    start_offsets: dict[int, int]  # job index -> s_i - t (0: starts at t)
    # Job index -> node of each unit, for jobs starting at t that are placed node by node.
    unit_nodes: dict[int, list[int]] = field(default_factory=dict)
    # Node-level models only (PCP'19): job index -> node -> units, for every job.
    unit_counts: dict[int, dict[int, int]] = field(default_factory=dict)
    # A list schedule's own state once its starts at t are placed: what is still free at t and
    # the protected room (the head's reservation, or the promises) as they leave it. The
    # work-conserving pass takes it (once) rather than placing the same starts again.
    after_starts: tuple[FreePool, ProtectedRoom | None] | None = field(
        default=None, compare=False, repr=False
    )

    def placements(self) -> dict[int, list[int]]:
        """The unit nodes of the jobs this plan starts at t (a decision)."""
        return {
            i: nodes for i, nodes in self.unit_nodes.items() if self.start_offsets[i] == 0
        }
