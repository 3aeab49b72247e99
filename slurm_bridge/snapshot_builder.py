"""Build the dispatching snapshot from what Slurm reports.

Nodes: every node of the managed partitions. Running jobs: every job (of any partition) that
holds resources on those nodes, from its real per-node allocation, plus the jobs the bridge
released that Slurm has not started yet (at their planned nodes, so that no cycle hands the
same cores out twice). Queued jobs: the held, pending jobs of the managed partitions, with the
site's rules Slurm gives (site_rules.py): their partitions, required features (an AND, or an OR
of AND-terms), priority, account and the reservation they must run in; the nodes' partitions and
features; the reservations on managed nodes as windows. A held job whose rules the snapshot
cannot express is not queued but named in `BuiltSnapshot.to_slurm` (the bridge releases it to
Slurm's own scheduler).

A released job's planned units are reserved only while they still fit next to the real
allocations and the released jobs already reserved (in release order): when Slurm laid another
job out otherwise than decided, they may not, and reserving them would make a snapshot that
over-commits a node (which the service refuses whole). Such a job is left out of the snapshot
and named in `BuiltSnapshot.unfit`; the bridge holds it again (`reconcile_no_longer_fits`).

`keep_order` then puts the nodes and jobs of consecutive snapshots in the order a session of
the service holds them (nodes in the order first seen, jobs in the order they entered), so that
each snapshot is a delta of the previous one and the decision does not depend on whether it
was asked through a session or with the whole snapshot.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from hpcdispatch.constraints import constraint_rules
from hpcdispatch.snapshot import (
    Node,
    NodeState,
    QueuedJob,
    RunningJob,
    Snapshot,
    UnavailabilityWindow,
    UnitAllocation,
)

from .job_units import CORE, MEM, UnitShape, unit_shape
from .site_rules import (
    back_at_window_end,
    job_priority,
    left_to_slurm_reason,
    windows_from_reservations,
)
from .slurm_json import ACTIVE_STATES, SlurmJob, SlurmNode
from .slurm_reservations import SlurmReservation

UP_STATES = frozenset({"idle", "mixed", "allocated", "completing"})
DOWN_FLAGS = frozenset({
    "NOT_RESPONDING", "FAIL", "POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN", "POWERING_UP",
    "MAINTENANCE", "REBOOT_ISSUED", "REBOOT_REQUESTED",
})


@dataclass(frozen=True, slots=True)
class BuilderSettings:
    partitions: frozenset[str]
    track_memory: bool = True
    default_walltime: int = 86_400  # seconds, for jobs without a time limit


@dataclass(frozen=True, slots=True)
class InFlight:
    """A job the bridge pinned and released, not seen running yet."""

    job_id: str
    unit_nodes: tuple[str, ...]  # one node per unit, as decided
    per_unit: Mapping[str, int]
    released_at: int  # Unix seconds
    requested_time: int


@dataclass(slots=True)
class BuiltSnapshot:
    snapshot: Snapshot
    shapes: dict[str, UnitShape]  # managed queued job id -> its unit shape
    ignored: dict[str, str] = field(default_factory=dict)  # held job id -> why not managed
    # Released, not started jobs whose planned units no longer fit (left out of the snapshot),
    # in release order: job id -> the nodes they no longer fit on.
    unfit: dict[str, list[str]] = field(default_factory=dict)
    # Held jobs of the managed partitions whose rules the snapshot cannot express (a
    # --constraint other than features joined by & and |, a --reservation of a maintenance or
    # of no managed node): job id -> why.
    to_slurm: dict[str, str] = field(default_factory=dict)


def node_state_with_windows(node: SlurmNode, windows: Sequence[UnavailabilityWindow],
                            now: int) -> NodeState:
    """`node_state`, except that a node drained or in maintenance, otherwise up, inside a
    window under way that admits nobody is up: it comes back at the window's end, and the
    window keeps all new work off it until then (site_rules.py)."""
    state = node_state(node)
    waiting = state is NodeState.DRAINED or (node.flags & DOWN_FLAGS) == {"MAINTENANCE"}
    if (waiting and node.state in UP_STATES and not node.flags & (DOWN_FLAGS - {"MAINTENANCE"})
            and back_at_window_end(node.name, windows, now)):
        return NodeState.UP
    return state


def node_state(node: SlurmNode) -> NodeState:
    if "DRAIN" in node.flags or node.state in ("drained", "draining", "drain"):
        return NodeState.DRAINED
    if node.state not in UP_STATES or node.flags & DOWN_FLAGS:
        return NodeState.DOWN
    return NodeState.UP


def is_managed_partition(job: SlurmJob, partitions: frozenset[str]) -> bool:
    return bool(job.partitions) and set(job.partitions) <= partitions


def build_snapshot(
    nodes: Sequence[SlurmNode],
    jobs: Sequence[SlurmJob],
    settings: BuilderSettings,
    now: int,
    in_flight: Mapping[str, InFlight] | None = None,
    reservations: Sequence[SlurmReservation] = (),
) -> BuiltSnapshot:
    in_flight = in_flight or {}
    managed_nodes = [n for n in nodes if set(n.partitions) & settings.partitions]
    track_memory = settings.track_memory and all(n.real_memory > 1 for n in managed_nodes)
    windows = windows_from_reservations(reservations, [n.name for n in managed_nodes], now)
    snap_nodes = tuple(
        Node(n.name, node_state_with_windows(n, windows, now), _capacity(n, track_memory),
             partitions=n.partitions, features=n.features)
        for n in managed_nodes
    )
    node_ids = {n.id for n in snap_nodes}
    node_memory = max((n.real_memory for n in managed_nodes), default=0)

    running: list[RunningJob] = []
    queued: list[QueuedJob] = []
    shapes: dict[str, UnitShape] = {}
    ignored: dict[str, str] = {}
    to_slurm: dict[str, str] = {}
    reserved: list[RunningJob] = []  # the released jobs not started yet, at planned nodes
    for job in jobs:
        flight = in_flight.get(job.id)
        if job.state in ACTIVE_STATES and job.allocations:
            active = _active(job, node_ids, track_memory, settings, now)
            if active.units:
                running.append(active)
        elif job.state == "PENDING" and flight is not None and not job.held:
            reserved.append(_released(job, flight, node_ids, track_memory, now))
            running.append(reserved[-1])
        elif job.held and is_managed_partition(job, settings.partitions):
            if job.is_array_pending or job.is_het:
                ignored[job.id] = "job arrays and heterogeneous jobs are not managed"
                continue
            why = left_to_slurm_reason(job, windows)
            if why:
                to_slurm[job.id] = why
                continue
            shape = unit_shape(job, track_memory, node_memory)
            shapes[job.id] = shape
            required, alternatives = constraint_rules(job.constraint) or ((), ())
            queued.append(QueuedJob(
                id=job.id, user=job.user, name=job.name, queue=",".join(job.partitions),
                submit_time=min(job.submit_time, now), units=shape.units,
                unit_request=dict(shape.per_unit),
                requested_time=job.time_limit_s or settings.default_walltime,
                priority=job_priority(job), partitions=job.partitions,
                required_features=required, feature_alternatives=alternatives,
                account=job.account, reservation=job.reservation,
            ))
    running = [r for r in running if r.units]
    unfit = _unfit_in_flight(snap_nodes, running, reserved, in_flight)
    if unfit:
        running = [r for r in running if r.id not in unfit]
    snapshot = Snapshot(time=now, nodes=snap_nodes, running=tuple(running), queued=tuple(queued),
                        windows=windows)
    return BuiltSnapshot(snapshot=snapshot, shapes=shapes, ignored=ignored, unfit=unfit,
                         to_slurm=to_slurm)


def _active(job: SlurmJob, node_ids: set[str], track_memory: bool, settings: BuilderSettings,
            now: int) -> RunningJob:
    """A job Slurm runs, on its allocations among the managed nodes (none: no units)."""
    return RunningJob(
        id=job.id, user=job.user, name=job.name,
        start_time=min(job.start_time or now, now),
        requested_time=job.time_limit_s or settings.default_walltime,
        expected_duration=None,
        units=tuple(
            UnitAllocation(a.node, _amounts(a.cpus, a.memory, track_memory))
            for a in job.allocations if a.node in node_ids
        ),
    )


def _released(job: SlurmJob, flight: InFlight, node_ids: set[str], track_memory: bool,
              now: int) -> RunningJob:
    """A job the bridge released that Slurm has not started yet: running, as far as the
    dispatcher knows, at the nodes it was given."""
    return RunningJob(
        id=job.id, user=job.user, name=job.name,
        start_time=min(flight.released_at, now),
        requested_time=flight.requested_time, expected_duration=None,
        units=tuple(
            UnitAllocation(node, _per_unit(flight.per_unit, track_memory))
            for node in flight.unit_nodes if node in node_ids
        ),
    )


def _unfit_in_flight(
    nodes: Sequence[Node], running: Sequence[RunningJob], reserved: Sequence[RunningJob],
    in_flight: Mapping[str, InFlight],
) -> dict[str, list[str]]:
    """The `reserved` released jobs (part of `running`) whose units do not fit next to the jobs
    Slurm really runs and the released jobs kept before them, in release order (`in_flight`'s).
    """
    capacity = {n.id: n.capacity for n in nodes}
    planned = {r.id: r for r in reserved}
    used: dict[str, Counter[str]] = {n.id: Counter() for n in nodes}
    for job in running:
        if job.id not in planned:
            for unit in job.units:
                used[unit.node_id].update(unit.amounts)
    unfit: dict[str, list[str]] = {}
    for job_id in in_flight:
        flight = planned.get(job_id)
        if flight is None:
            continue
        wanted: dict[str, Counter[str]] = {}
        for unit in flight.units:
            wanted.setdefault(unit.node_id, Counter()).update(unit.amounts)
        over = [node for node, amounts in wanted.items()
                if any(amount > 0 and used[node][resource] + amount
                       > capacity[node].get(resource, 0)
                       for resource, amount in amounts.items())]
        if over:
            unfit[job_id] = over
            continue
        for node, amounts in wanted.items():
            used[node].update(amounts)
    return unfit


_Job = TypeVar("_Job", RunningJob, QueuedJob)


def keep_order(previous: Snapshot | None, snapshot: Snapshot) -> Snapshot:
    """`snapshot` with its lists in the order a session holds them after `previous`.

    Nodes: those of `previous` in its order (changed or not), then the new ones. Running and
    queued jobs: those unchanged since `previous` in its order, then the new or changed ones
    (a job that started, a released job that Slurm started, a re-held job, a modified job) in
    `snapshot`'s order. The first snapshot keeps Slurm's order. Both decision paths (session
    and full snapshots) send this order, so a dispatcher's queue position (its tie-break
    between equal submit times) is the same in both; only a node that disappears or a changed
    cluster name makes the client open its session again.
    """
    if previous is None:
        return snapshot
    return dataclasses.replace(
        snapshot,
        nodes=_nodes_in_order(previous.nodes, snapshot.nodes),
        running=_jobs_in_order(previous.running, snapshot.running),
        queued=_jobs_in_order(previous.queued, snapshot.queued),
    )


def _nodes_in_order(old: Sequence[Node], new: Sequence[Node]) -> tuple[Node, ...]:
    by_id = {n.id: n for n in new}
    seen = {n.id for n in old}
    return (tuple(by_id[n.id] for n in old if n.id in by_id)
            + tuple(n for n in new if n.id not in seen))


def _jobs_in_order(old: Sequence[_Job], new: Sequence[_Job]) -> tuple[_Job, ...]:
    by_id = {j.id: j for j in new}
    kept = tuple(j for j in old if by_id.get(j.id) == j)
    kept_ids = {j.id for j in kept}
    return kept + tuple(j for j in new if j.id not in kept_ids)


def _capacity(node: SlurmNode, track_memory: bool) -> dict[str, int]:
    cap = {CORE: max(1, node.cpus)}
    if track_memory:
        cap[MEM] = node.real_memory
    return cap


def _amounts(cpus: int, memory: int, track_memory: bool) -> dict[str, int]:
    amounts = {CORE: cpus}
    if track_memory:
        amounts[MEM] = memory
    return amounts


def _per_unit(per_unit: Mapping[str, int], track_memory: bool) -> dict[str, int]:
    return {r: v for r, v in per_unit.items() if track_memory or r != MEM}
