"""HCP'19 (CP 2019): CP scheduling on pooled capacity, then best-fit allocation.

The model sees one cumulative per resource type over the whole system; pooling hides
fragmentation, so a job the model starts at t may not fit on any node and then waits.

Under the promise book, every promise is a fixed block of the cumulatives: job j promised P_j
holds rn_j × req_j,r of each type r over [P_j, P_j + d_j), so the window's s_i are planned on
Tcap_r less the running work and every promise (the node profile's sum). The jobs with s_i = t
are then placed best fit on what every promise leaves each node for all of their d_i; one
that does not fit so waits.
"""

from __future__ import annotations

from typing import ClassVar

from ..planning.plan import Plan
from ..planning.protected_room import place_now
from ..table_row import TableRow
from .cp_dispatch import CpDispatcher
from .formulation import Formulation


class Hcp19Formulation(Formulation):
    """The scheduling model alone: starts on pooled capacity, nodes chosen afterwards."""

    def allocate(self, plan: Plan, first_fit: bool) -> dict[int, list[int]]:
        """Best fit, in priority order, for the jobs the schedule starts at t, around the
        protected room (the head's reservation, or the promises)."""
        pool = self.problem.free_now.copy()
        room = self.reservation.copy() if self.reservation is not None else None
        placements: dict[int, list[int]] = {}
        for job in self.schedule.jobs:
            if plan.start_offsets[job.index] == 0:
                nodes = place_now(pool, room, job, first_fit)
                if nodes is not None:
                    placements[job.index] = nodes
        return placements


class Hcp19Dispatcher(CpDispatcher):
    name: ClassVar[str] = "hcp19"
    # The tables of README.md and docs/configuration.md (scripts/gen_tables.py).
    table: ClassVar[TableRow] = TableRow(
        summary="CP schedule on pooled capacity (one cumulative per resource type), then "
        "best-fit allocation of the jobs that start now",
        model_size="independent of nodes")
    exact_allocation_now: ClassVar[bool] = False

    formulation: ClassVar[type[Formulation]] = Hcp19Formulation
