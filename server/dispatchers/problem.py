"""A dispatching instance in the dispatchers' terms: indexed nodes, vectors, durations.

Built once per request from a validated Snapshot and the predicted durations; every dispatcher
reads it and none modifies it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hpcdispatch.server.dispatchers.capacity_profile import CapacityProfile
from hpcdispatch.server.dispatchers.free_pool import FreePool, Vec
from hpcdispatch.snapshot import Node, NodeState, Snapshot

# Distinct release times of running work in the pooled (after-t) capacity view.
MAX_RELEASE_STEPS = 256
# Durations beyond this are treated as this long in the models (real traces hold requested
# times of decades); only what starts at t is dispatched, so this only shortens far plans, and
# it keeps weights × horizon × jobs within 64-bit integers.
MAX_MODEL_DURATION = 366 * 86_400


@dataclass(frozen=True, slots=True)
class Job:
    """A queued job i."""

    index: int  # position in the snapshot's queue
    id: str
    submit: int  # q_i
    units: int  # rn_i
    req: Vec  # per-unit request per resource type
    duration: int  # d_i, predicted, >= 1

    def demand(self) -> Vec:
        """Pooled demand rn_i × req_i."""
        return tuple(self.units * r for r in self.req)

    def slowdown_at(self, t: int) -> float:
        return (t - self.submit + self.duration) / self.duration


@dataclass(frozen=True, slots=True)
class RunningBlock:
    """Resources a running job holds on one node until `end` (relative to t, >= 1)."""

    node: int
    amounts: Vec
    end: int


@dataclass(slots=True)
class Problem:
    t: int
    resources: tuple[str, ...]
    node_ids: Sequence[str]  # read-only: shared by every problem of one node list
    capacity: Sequence[Vec]
    eligible: Sequence[bool]  # node is up: it may receive new units
    free_now: FreePool  # free at t on eligible nodes
    blocks: list[RunningBlock]  # running work, remaining duration max(1, s_i + d_i - t)
    jobs: list[Job]
    up_capacity: Vec  # Σ cap over eligible nodes (the pooled Tcap_r)
    _capacity_groups: dict[Vec, int] | None = None
    _releases: list[tuple[int, Vec]] | None = None
    _first_end: tuple[int | None] | None = None  # (first end,) once computed

    def up_capacity_groups(self) -> dict[Vec, int]:
        """Distinct capacity vectors of up nodes, with how many nodes have each."""
        if self._capacity_groups is None:
            groups: dict[Vec, int] = defaultdict(int)
            for cap, ok in zip(self.capacity, self.eligible, strict=True):
                if ok:
                    groups[cap] += 1
            self._capacity_groups = dict(groups)
        return self._capacity_groups

    def pooled_free_now(self) -> Vec:
        used = [0] * len(self.resources)
        for b in self.blocks:
            if self.eligible[b.node]:
                for r, a in enumerate(b.amounts):
                    used[r] += a
        return tuple(c - u for c, u in zip(self.up_capacity, used, strict=True))

    def pooled_releases(self) -> list[tuple[int, Vec]]:
        """Running work on eligible nodes merged by end time: (end, amounts), sorted.

        At most MAX_RELEASE_STEPS distinct ends are kept: beyond that, an end is moved later to
        the next kept one. Freeing resources later than predicted only makes the plan for after
        t more cautious; what is free at t, the only thing dispatched, is exact.
        """
        if self._releases is not None:
            return self._releases
        ends = np.fromiter((b.end for b in self.blocks if self.eligible[b.node]), dtype=np.int64)
        amounts = np.asarray(
            [b.amounts for b in self.blocks if self.eligible[b.node]], dtype=np.int64
        ).reshape(len(ends), len(self.resources))
        distinct = np.unique(ends)
        if len(distinct) > MAX_RELEASE_STEPS:
            stride = -(-len(distinct) // MAX_RELEASE_STEPS)
            kept = np.unique(np.append(distinct[stride - 1 :: stride], distinct[-1]))
            ends = kept[np.searchsorted(kept, ends)]
            distinct = kept
        totals = np.zeros((len(distinct), len(self.resources)), dtype=np.int64)
        np.add.at(totals, np.searchsorted(distinct, ends), amounts)
        self._releases = [
            (int(end), tuple(int(a) for a in row))
            for end, row in zip(distinct, totals, strict=True)
        ]
        return self._releases

    def first_end(self) -> int | None:
        """The earliest end of running work, relative to t (None: nothing runs)."""
        if self._first_end is None:
            self._first_end = (min((b.end for b in self.blocks), default=None),)
        return self._first_end[0]

    def pooled_profile(self) -> CapacityProfile:
        return CapacityProfile(self.pooled_free_now(), self.pooled_releases())

    def releases_by_time(self) -> list[tuple[int, list[RunningBlock]]]:
        by_end: dict[int, list[RunningBlock]] = defaultdict(list)
        for b in self.blocks:
            if self.eligible[b.node]:
                by_end[b.end].append(b)
        return sorted(by_end.items())


def later_start_bounds(problem: Problem, jobs: list[Job]) -> dict[int, int]:
    """Earliest start after t of each job in `jobs` that does not start at t (job index -> start).

    Until something ends (running work, or a job started at t), what is free stays what it is
    at t once the starts are made: a job that does not start at t cannot start before the first
    end either. The bound for job i is the earliest running end, or the shortest d_j of the other
    jobs (one of them may start at t and end then), whichever comes first; at least 1. Without
    it a plan puts a job that may not start now (its placement would touch the head's
    reservation) at t + 1, where it holds pooled capacity that jobs able to start now need.
    """
    first_end = problem.first_end()
    two_shortest = sorted(jobs, key=lambda j: (j.duration, j.index))[:2]
    bounds: dict[int, int] = {}
    for job in jobs:
        other = next((j.duration for j in two_shortest if j.index != job.index), None)
        ends = [e for e in (first_end, other) if e is not None]
        bounds[job.index] = max(1, min(ends, default=1))
    return bounds


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


def build_problem(
    snapshot: Snapshot,
    queued_durations: dict[str, int],
    running_durations: dict[str, int],
    nodes: NodeIndex | None = None,
) -> Problem:
    """Index the snapshot. Durations are d_i in seconds (>= 1) for every queued / running job.

    `nodes` is `index_nodes(snapshot.nodes)` when the caller already has it.
    """
    t = snapshot.time
    index = nodes if nodes is not None else index_nodes(snapshot.nodes)
    resources = index.resources
    free = list(index.capacity)  # minus what running jobs hold, below
    blocks: list[RunningBlock] = []
    for job in snapshot.running:
        # An under-predicted job still running needs at least one more second.
        end = min(max(1, job.start_time + running_durations[job.id] - t), MAX_MODEL_DURATION)
        per_node: dict[int, list[int]] = defaultdict(lambda: [0] * len(resources))
        for unit in job.units:
            acc = per_node[index.position[unit.node_id]]
            for r, name in enumerate(resources):
                acc[r] += unit.amounts.get(name, 0)
        for n, amounts in per_node.items():
            free[n] = tuple(f - a for f, a in zip(free[n], amounts, strict=True))
            blocks.append(RunningBlock(n, tuple(amounts), end))
    jobs = [
        Job(
            index=i,
            id=q.id,
            submit=q.submit_time,
            units=q.units,
            req=tuple(q.unit_request.get(r, 0) for r in resources),
            duration=min(max(1, queued_durations[q.id]), MAX_MODEL_DURATION),
        )
        for i, q in enumerate(snapshot.queued)
    ]
    return Problem(
        t=t,
        resources=resources,
        node_ids=index.node_ids,
        capacity=index.capacity,
        eligible=index.eligible,
        free_now=FreePool(free, index.eligible, index.scale),
        blocks=blocks,
        jobs=jobs,
        up_capacity=index.up_capacity,
    )
