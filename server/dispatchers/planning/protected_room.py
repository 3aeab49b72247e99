"""What nothing started now may take: the capacity a CP decision protects over time.

Two kinds of protection share one interface, so that the list schedules, the models and the
work-conserving pass treat them alike:

- EASY's head reservation (`reservation.Reservation`): one blocked job's units from τ on;
- the promise book (`promise_room.PromiseRoom`): every held promise s_i, each job's units
  over [s_i, s_i + d_i), node by node.

Each answers, for the decision at t: the pooled capacity over time once the protected blocks
are held (what the list schedules and the pooled cumulatives of HCP'19 and PCP'20 plan on),
the fixed node-level blocks (PCP'19's per-node cumulatives), what a job may use now if it runs
its whole d_i (PCP'20's position domains), and a placement at t that leaves the protected
room alone (the decision's node-by-node placement, which no model output bypasses).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ...domain.free_pool import FreePool, Vec
    from .capacity_profile import CapacityProfile
    from .problem import Job, Problem

# A fixed block of the pooled view after t: (start, length, amounts per resource type).
PooledBlock = tuple[int, int, "Vec"]
# A fixed block of one node: (node, start, end, amounts per resource type).
NodeBlock = tuple[int, int, int, "Vec"]


class ProtectedRoom(Protocol):
    """Capacity a decision at t protects from the jobs it starts now."""

    def copy(self) -> ProtectedRoom:
        """An independent copy (the starts recorded on it do not reach this one)."""
        ...

    def pooled_profile(self, problem: Problem) -> CapacityProfile:
        """The pooled free capacity after t with the running work and every protected block
        held (a copy the caller may change)."""
        ...

    def pooled_fixed(self, problem: Problem) -> list[PooledBlock]:
        """The same as fixed blocks (running work included), for a model's cumulatives; a
        model that holds them and nothing else is feasible."""
        ...

    def node_fixed(self) -> list[NodeBlock]:
        """The protected blocks node by node (running work not included)."""
        ...

    def pool_for(self, job: Job, free_now: FreePool) -> FreePool | None:
        """What `job` may use now, node by node, if it runs its whole d_i (None: all that is
        free now, `free_now`)."""
        ...

    def place(self, free_now: FreePool, job: Job, first_fit: bool) -> list[int] | None:
        """The node of each unit of `job` started now without touching the protected room,
        taken from `free_now` and recorded here; None where it does not fit so."""
        ...

    def take(self, free_now: FreePool, nodes: list[int], job: Job) -> None:
        """Record that `job` starts now on `nodes`, already taken from `free_now`."""
        ...

    def held_jobs(self) -> frozenset[int]:
        """The jobs whose own room is the protected one (not to be started around it)."""
        ...

    def fill_order(self, job: Job) -> int:
        """Sort key of the jobs started now when their units fill each node's free part from
        its right end: the ones with the least room (`pool_for`) first."""
        ...


def place_now(
    free_now: FreePool, room: ProtectedRoom | None, job: Job, first_fit: bool = False,
) -> list[int] | None:
    """Place `job` at t, taking from `free_now`, around the protected room if there is one."""
    if room is None:
        return free_now.place(job.req, job.units, first_fit)
    return room.place(free_now, job, first_fit)


def pooled_profile(problem: Problem, room: ProtectedRoom | None) -> CapacityProfile:
    """The pooled view after t, with the protected room held if there is one."""
    return problem.pooled_profile() if room is None else room.pooled_profile(problem)
