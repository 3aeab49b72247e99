"""A dispatching instance in the dispatchers' terms: indexed nodes, vectors, durations.

Built once per request from a validated Snapshot and the predicted durations; every dispatcher
reads it and none modifies it. Its node list is indexed by a `NodeIndex`, and what the running
work makes of the nodes is an `Occupancy` (the domain room: server/domain/node_index.py,
occupancy.py): computed from the snapshot's running jobs, or kept between decisions by a
session (server/sessions/running_work.py) and handed to `build_problem`.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from hpcdispatch.snapshot import Snapshot

from ...domain.free_pool import FreePool, Vec, units_per_node
from ...domain.node_index import NodeIndex, index_nodes
from ...domain.occupancy import (
    MAX_MODEL_DURATION,
    Occupancy,
    RunningTable,
    occupancy_from_snapshot,
)
from .capacity_profile import CapacityProfile
from .eligibility import Eligibility, build_eligibility

# Distinct release times of running work in the pooled (after-t) capacity view.
MAX_RELEASE_STEPS = 256


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
    # s_i (absolute) a real promise held before its shape changed: promised anew, move reported
    reshaped: int | None = None
    priority: int = 0  # the workload manager's, higher first (0 for all: submit order alone)

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
    # A site's rules: each job's nodes and the windows (planning/eligibility.py); None: none
    eligibility: Eligibility | None = None
    # Whether d_i comes from a predictor that gives every job its requested time in every
    # decision (`walltime`): only then can a plan at the limits be a promise
    # (planning/guaranteed_starts.py). True where no predictor is named (a problem built
    # from durations given by the caller, as tests do).
    limits_predictor: bool = True
    _capacity_groups: dict[Vec, int] | None = None
    _releases: list[tuple[int, Vec]] | None = None
    _first_end: tuple[int | None] | None = None  # (first end,) once computed
    _pooled_free: Vec | None = None
    _by_time: list[tuple[int, list[RunningBlock]]] | None = None
    _events: ReleaseEvents | None = None
    _profile: CapacityProfile | None = None
    _by_slowdown: list[Job] | None = None
    _by_index: dict[int, Job] | None = None
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

    def job_by_index(self) -> dict[int, Job]:
        """Each queued job by its index (built once; read-only)."""
        if self._by_index is None:
            self._by_index = {j.index: j for j in self.jobs}
        return self._by_index

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
            reshaped=q.reshaped_promise,
            priority=q.priority,
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
        eligibility=build_eligibility(snapshot, index),
        _capacity_groups=index.up_capacity_groups(),
    )


def at_limits(problem: Problem) -> Problem:
    """`problem` as the workload manager's limits bound it: each running row ends at its job's
    requested time (`RunningTable.limit_ends`) and each queued job's d_i is its requested time
    (`Job.at_most`). A start planned on it holds whatever the predictions: what a promise is
    computed against. Job indices, nodes and what is free now are `problem`'s."""
    run = problem.running
    limits = run.limit_ends
    jobs = [job if job.duration >= job.at_most else
            dataclasses.replace(job, duration=min(job.at_most, MAX_MODEL_DURATION))
            for job in problem.jobs]
    return Problem(
        t=problem.t, resources=problem.resources, node_ids=problem.node_ids,
        capacity=problem.capacity, eligible=problem.eligible, free_now=problem.free_now,
        running=RunningTable(nodes=run.nodes, amounts=run.amounts, ends=limits, up=run.up,
                             limits=limits),
        jobs=jobs, up_capacity=problem.up_capacity, eligibility=problem.eligibility,
        _capacity_groups=problem._capacity_groups,
    )


def pooled_steps(problem: Problem) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The pooled free amounts over time of the running work (step starts, amounts per step
    and type), as `start_estimates.StepPlan` takes them."""
    releases = problem.pooled_releases()
    times = np.asarray([0, *(end for end, _ in releases)], dtype=np.int64)
    steps = np.asarray([problem.pooled_free_now(), *(amounts for _, amounts in releases)],
                       dtype=np.int64).reshape(len(times), len(problem.resources))
    return times, np.cumsum(steps, axis=0)
