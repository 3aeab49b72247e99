"""A dispatching instance in the dispatchers' terms: indexed nodes, vectors, durations.

Built once per request from a validated Snapshot and the predicted durations; every dispatcher
reads it and none modifies it. What the running work makes of the nodes (one row per running
job and node, the free pool) is an `Occupancy`: computed from the snapshot's running jobs
(`occupancy_from_snapshot`), or kept between decisions by a session
(server/sessions/running_work.py) and handed to `build_problem`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from hpcdispatch.snapshot import Node, NodeState, RunningJob, Snapshot

from .capacity_profile import CapacityProfile
from .free_pool import FreePool, Vec, units_per_node

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
    pooled: Vec = ()  # rn_i × req_i, when the maker computed it (build_problem does)
    promised: int | None = None  # s_i an earlier answer promised (absolute), sent back
    requested: int = 0  # the user's limit, seconds: the job is killed then (0: not known)

    @property
    def at_most(self) -> int:
        """How long the job can run at most: its requested time, or d_i where unknown."""
        return max(self.duration, self.requested)

    def demand(self) -> Vec:
        """Pooled demand rn_i × req_i."""
        return self.pooled or tuple(self.units * r for r in self.req)

    def slowdown_at(self, t: int) -> float:
        return (t - self.submit + self.duration) / self.duration


def slowdown_rank(job: Job, t: int) -> tuple[float, int, int, int]:
    """Priority at t, smallest first: highest current slowdown (t - q_i + d_i) / d_i first;
    ties: smaller d_i, smaller demand."""
    d = job.duration
    return -((t - job.submit + d) / d), d, d * sum(job.demand()), job.index  # slowdown_at(t)


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
    running: RunningTable  # running work, remaining duration max(1, s_i + d_i - t)
    jobs: list[Job]
    up_capacity: Vec  # Σ cap over eligible nodes (the pooled Tcap_r)
    _capacity_groups: dict[Vec, int] | None = None
    _releases: list[tuple[int, Vec]] | None = None
    _first_end: tuple[int | None] | None = None  # (first end,) once computed
    _pooled_free: Vec | None = None
    _by_time: list[tuple[int, list[RunningBlock]]] | None = None
    _events: ReleaseEvents | None = None
    _profile: CapacityProfile | None = None
    _by_slowdown: list[Job] | None = None
    _blocks: list[RunningBlock] | None = None
    _empty_fit: dict[Vec, int] = field(default_factory=dict)

    @property
    def blocks(self) -> list[RunningBlock]:
        """The running work as one object per (job, node) (built on first use; read-only)."""
        if self._blocks is None:
            run = self.running
            self._blocks = [
                RunningBlock(n, tuple(a), e)
                for n, a, e in zip(
                    run.nodes.tolist(), run.amounts.tolist(), run.ends.tolist(), strict=True
                )
            ]
        return self._blocks

    def up_capacity_groups(self) -> dict[Vec, int]:
        """Distinct capacity vectors of up nodes, with how many nodes have each."""
        if self._capacity_groups is None:
            groups: dict[Vec, int] = defaultdict(int)
            for cap, ok in zip(self.capacity, self.eligible, strict=True):
                if ok:
                    groups[cap] += 1
            self._capacity_groups = dict(groups)
        return self._capacity_groups

    def units_fit_empty(self, req: Vec) -> int:
        """Units of per-unit request `req` all up nodes could hold with nothing running
        (remembered per request vector)."""
        fit = self._empty_fit.get(req)
        if fit is None:
            fit = self._empty_fit[req] = sum(
                count * units_per_node(cap, req)
                for cap, count in self.up_capacity_groups().items()
            )
        return fit

    def pooled_free_now(self) -> Vec:
        if self._pooled_free is None:
            up = self.running.up
            # A product, not amounts[up].sum(axis=0): numpy is slow at both on narrow rows.
            used = up.astype(np.int64) @ self.running.amounts
            self._pooled_free = tuple(
                c - int(u) for c, u in zip(self.up_capacity, used.tolist(), strict=True)
            )
        return self._pooled_free

    def pooled_releases(self) -> list[tuple[int, Vec]]:
        """Running work on eligible nodes merged by end time: (end, amounts), sorted.

        At most MAX_RELEASE_STEPS distinct ends are kept: beyond that, an end is moved later to
        the next kept one. Freeing resources later than predicted only makes the plan for after
        t more cautious; what is free at t, the only thing dispatched, is exact.
        """
        if self._releases is not None:
            return self._releases
        events = self.release_events()  # sorted by end
        ends, amounts = events.ends, events.amounts
        if not len(ends):
            self._releases = []
            return self._releases
        first = np.append(0, np.flatnonzero(ends[1:] != ends[:-1]) + 1)  # each end's first event
        kept = ends[first]
        if len(kept) > MAX_RELEASE_STEPS:
            stride = -(-len(kept) // MAX_RELEASE_STEPS)
            kept = np.unique(np.append(kept[stride - 1 :: stride], kept[-1]))
            # The events of kept end k: those after kept end k - 1, up to k.
            first = np.append(0, ends.searchsorted(kept[:-1], side="right"))
        totals = np.add.reduceat(amounts, first, axis=0)
        self._releases = [
            (int(end), tuple(int(a) for a in row))
            for end, row in zip(kept.tolist(), totals.tolist(), strict=True)
        ]
        return self._releases

    def first_end(self) -> int | None:
        """The earliest end of running work, relative to t (None: nothing runs)."""
        if self._first_end is None:
            ends = self.running.ends
            self._first_end = (int(ends.min()) if len(ends) else None,)
        return self._first_end[0]

    def pooled_profile(self) -> CapacityProfile:
        """The pooled capacity over time of the running work (a copy the caller may change;
        built once)."""
        if self._profile is None:
            self._profile = CapacityProfile(self.pooled_free_now(), self.pooled_releases())
        return self._profile.copy()

    def jobs_by_slowdown(self) -> list[Job]:
        """The queue in priority order, `slowdown_rank` (sorted once; read-only)."""
        if self._by_slowdown is None:
            t = self.t
            self._by_slowdown = sorted(self.jobs, key=lambda j: slowdown_rank(j, t))
        return self._by_slowdown

    def releases_by_time(self) -> list[tuple[int, list[RunningBlock]]]:
        """Running work on eligible nodes grouped by end, sorted (computed once; read-only)."""
        if self._by_time is None:
            events = self.release_events()
            blocks = self.blocks
            by_end: list[tuple[int, list[RunningBlock]]] = []
            for end, i in zip(events.ends.tolist(), events.index.tolist(), strict=True):
                if not by_end or by_end[-1][0] != end:
                    by_end.append((end, []))
                by_end[-1][1].append(blocks[i])
            self._by_time = by_end
        return self._by_time

    def release_events(self) -> ReleaseEvents:
        """Running blocks on eligible nodes in release order: by end, then block order
        (computed once)."""
        if self._events is None:
            run = self.running
            index = np.flatnonzero(run.up)
            index = index[stable_order(run.ends[index])]
            self._events = ReleaseEvents(
                ends=run.ends[index], nodes=run.nodes[index],
                amounts=run.amounts.take(index, axis=0),  # faster than [index] on narrow rows
                index=index,
            )
        return self._events


@dataclass(frozen=True, slots=True)
class RunningTable:
    """Running work as columns, one row per (running job, node it holds), in snapshot order."""

    nodes: npt.NDArray[np.int64]
    amounts: npt.NDArray[np.int64]  # rows × resource types
    ends: npt.NDArray[np.int64]  # relative to t, >= 1
    up: npt.NDArray[np.bool_]  # the row's node is eligible


@dataclass(frozen=True, slots=True)
class ReleaseEvents:
    """Running blocks on eligible nodes in release order (by end, then block order)."""

    ends: npt.NDArray[np.int64]
    nodes: npt.NDArray[np.int64]
    amounts: npt.NDArray[np.int64]  # one row per block
    index: npt.NDArray[np.int64]  # row in the RunningTable


def stable_order(keys: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """`np.argsort(keys, kind="stable")` as one plain sort of the keys made distinct by their
    position (numpy's stable sort of 64-bit integers takes several times longer)."""
    count = len(keys)
    if count < 2:
        return np.arange(count, dtype=np.int64)
    low, high = int(keys.min()), int(keys.max())
    if (high - low + 1) * count >= 2**62:
        return np.argsort(keys, kind="stable").astype(np.int64, copy=False)
    order: npt.NDArray[np.int64] = keys - low  # in place from here: large arrays
    order *= count
    order += np.arange(count)
    order.sort()
    order %= count
    return order


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
    if not two_shortest:
        return {}

    def bound(other: Job | None) -> int:
        ends = [e for e in (first_end, other.duration if other is not None else None)
                if e is not None]
        return max(1, min(ends, default=1))

    # The shortest job's other is the second shortest; every other job's is the shortest.
    shortest = two_shortest[0].index
    own = bound(two_shortest[1] if len(two_shortest) > 1 else None)
    usual = bound(two_shortest[0])
    return {job.index: own if job.index == shortest else usual for job in jobs}


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


@dataclass(frozen=True, slots=True)
class Occupancy:
    """What the running work makes of the nodes at t: one row per (running job, node it holds)
    with its end, and what is left free on every node. Read-only once built."""

    running: RunningTable
    # Free at t on eligible nodes, groups listed by their first node; it becomes the Problem's
    # free_now, so it is made for one decision (a keeper of the state hands out a copy).
    free_now: FreePool


def occupancy_from_snapshot(
    snapshot: Snapshot, running_durations: Mapping[str, int], index: NodeIndex
) -> Occupancy:
    """The Occupancy of a full snapshot: one pass over its running jobs' units.

    Rows come in snapshot order; a job's units on one node are one row, at the place of the
    first of them. A row's end is s_i + d_i - t, at least 1 (an under-predicted job still
    running needs at least one more second) and at most MAX_MODEL_DURATION.
    """
    jobs = snapshot.running
    count = len(jobs)
    starts = np.fromiter((j.start_time for j in jobs), dtype=np.int64, count=count)
    durations = np.fromiter((running_durations[j.id] for j in jobs), dtype=np.int64, count=count)
    job_ends = np.clip(starts + durations - snapshot.time, 1, MAX_MODEL_DURATION)
    node_rows, amounts, job_of_row = running_rows(jobs, index.position, index.resources)
    return occupancy_of_rows(index, node_rows, amounts, job_ends[job_of_row])


def running_rows(
    jobs: Sequence[RunningJob], position: Mapping[str, int], resources: tuple[str, ...]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The rows of running `jobs`: for each, its node (index), the amounts per resource type
    the job holds there, and the job (position in `jobs`); in job order, then in the order of
    each job's first unit on a node (`job_rows`)."""
    count = len(jobs)
    width = len(resources)
    if all(len(j.units) == 1 for j in jobs):  # one row per job: column by column
        units = [j.units[0] for j in jobs]
        nodes = np.fromiter((position[u.node_id] for u in units), dtype=np.int64, count=count)
        amounts = np.empty((count, width), dtype=np.int64)
        for r, name in enumerate(resources):
            amounts[:, r] = np.fromiter((u.amounts.get(name, 0) for u in units),
                                        dtype=np.int64, count=count)
        return nodes, amounts, np.arange(count, dtype=np.int64)
    rows: list[int] = []
    held: list[int] = []
    owner: list[int] = []
    for i, job in enumerate(jobs):
        for n, job_amounts in job_rows(job, position, resources):
            rows.append(n)
            held.extend(job_amounts)
            owner.append(i)
    return (
        np.asarray(rows, dtype=np.int64),
        np.asarray(held, dtype=np.int64).reshape(len(rows), width),
        np.asarray(owner, dtype=np.int64),
    )


def job_rows(
    job: RunningJob, position: Mapping[str, int], resources: tuple[str, ...]
) -> list[tuple[int, list[int]]]:
    """A running job's rows: (node index, amounts it holds there), nodes in first-unit order."""
    units = job.units
    if len(units) == 1:
        get = units[0].amounts.get
        return [(position[units[0].node_id], [get(name, 0) for name in resources])]
    per_node: dict[int, list[int]] = {}
    for unit in units:
        n = position[unit.node_id]
        acc = per_node.get(n)
        if acc is None:
            acc = per_node[n] = [0] * len(resources)
        for r, name in enumerate(resources):
            acc[r] += unit.amounts.get(name, 0)
    return list(per_node.items())


def occupancy_of_rows(
    index: NodeIndex,
    nodes: npt.NDArray[np.int64],
    amounts: npt.NDArray[np.int64],
    ends: npt.NDArray[np.int64],
    free_now: FreePool | None = None,
) -> Occupancy:
    """The Occupancy of running rows; `free_now` when the caller keeps it up to date (it must
    equal capacity minus the rows' amounts, groups listed by their first node)."""
    running = RunningTable(
        nodes=nodes, amounts=amounts, ends=ends, up=index.eligible_array()[nodes],
    )
    if free_now is None:
        free = index.capacity_array().copy()
        np.subtract.at(free, nodes, amounts)
        free_now = FreePool.from_array(free, index.eligible, index.scale)
    return Occupancy(running, free_now)


def build_problem(
    snapshot: Snapshot,
    queued_durations: Mapping[str, int],
    running_durations: Mapping[str, int] | None,
    nodes: NodeIndex | None = None,
    occupancy: Occupancy | None = None,
) -> Problem:
    """Index the snapshot. Durations are d_i in seconds (>= 1) for every queued / running job.

    `nodes` is `index_nodes(snapshot.nodes)` when the caller already has it; `occupancy` is
    `occupancy_from_snapshot(snapshot, running_durations, nodes)` when the caller keeps it (a
    session does, updated by its deltas); `running_durations` is then not needed.
    """
    index = nodes if nodes is not None else index_nodes(snapshot.nodes)
    if occupancy is None:
        assert running_durations is not None, "running durations or an occupancy"
        occupancy = occupancy_from_snapshot(snapshot, running_durations, index)
    resources = index.resources
    jobs = []
    for i, q in enumerate(snapshot.queued):
        get, units = q.unit_request.get, q.units
        req = tuple([get(r, 0) for r in resources])
        jobs.append(Job(
            index=i,
            id=q.id,
            submit=q.submit_time,
            units=units,
            req=req,
            duration=min(max(1, queued_durations[q.id]), MAX_MODEL_DURATION),
            pooled=tuple([units * r for r in req]),
            promised=q.promised_start,
            requested=q.requested_time,
        ))
    return Problem(
        t=snapshot.time,
        resources=resources,
        node_ids=index.node_ids,
        capacity=index.capacity,
        eligible=index.eligible,
        free_now=occupancy.free_now,
        running=occupancy.running,
        jobs=jobs,
        up_capacity=index.up_capacity,
        _capacity_groups=index.up_capacity_groups(),
    )
