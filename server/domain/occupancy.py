"""What the running work makes of the nodes at t: one row per running job and node, the free pool.

An `Occupancy` is computed from a snapshot's running jobs (`occupancy_from_snapshot`), or kept
between decisions by a session (server/sessions/running_work.py) and handed to the pipeline,
which makes it the Problem's `running` and `free_now`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hpcdispatch.snapshot import RunningJob, Snapshot

from .free_pool import FreePool
from .node_index import NodeIndex

# Durations beyond this are treated as this long in the models (real traces hold requested
# times of decades); only what starts at t is dispatched, so this only shortens far plans, and
# it keeps weights × horizon × jobs within 64-bit integers.
MAX_MODEL_DURATION = 366 * 86_400


@dataclass(frozen=True, slots=True)
class RunningTable:
    """Running work as columns, one row per (running job, node it holds), in snapshot order."""

    nodes: npt.NDArray[np.int64]
    amounts: npt.NDArray[np.int64]  # rows × resource types
    ends: npt.NDArray[np.int64]  # relative to t, >= 1
    up: npt.NDArray[np.bool_]  # the row's node is eligible
    # The ends at the requested times, the limit at which the workload manager kills a job
    # (relative to t, >= 1, >= the row's end; 1 for a job already past it): what a promise is
    # computed against. None: not known, the ends stand in.
    limits: npt.NDArray[np.int64] | None = None

    @property
    def limit_ends(self) -> npt.NDArray[np.int64]:
        """The rows' ends at the requested times (`limits`, or the ends where not known)."""
        return self.ends if self.limits is None else self.limits


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
    requested = np.fromiter((j.requested_time for j in jobs), dtype=np.int64, count=count)
    job_limits = limit_ends(starts, durations, requested, snapshot.time)
    node_rows, amounts, job_of_row = running_rows(jobs, index.position, index.resources)
    return occupancy_of_rows(index, node_rows, amounts, job_ends[job_of_row],
                             limits=job_limits[job_of_row])


def limit_ends(starts: npt.NDArray[np.int64], durations: npt.NDArray[np.int64],
               requested: npt.NDArray[np.int64], t: int) -> npt.NDArray[np.int64]:
    """Running jobs' ends at their requested times, relative to t: max(1, s_i + max(d_i,
    requested_i) - t), at most MAX_MODEL_DURATION (a requested time of 0, not known, leaves
    d_i; a job past its limit is expected to end within a second, as the manager kills it)."""
    return np.clip(starts + np.maximum(durations, requested) - t, 1, MAX_MODEL_DURATION)


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
    limits: npt.NDArray[np.int64] | None = None,
) -> Occupancy:
    """The Occupancy of running rows; `free_now` when the caller keeps it up to date (it must
    equal capacity minus the rows' amounts, groups listed by their first node)."""
    running = RunningTable(
        nodes=nodes, amounts=amounts, ends=ends, up=index.eligible_array()[nodes],
        limits=None if limits is None else np.maximum(limits, ends),
    )
    if free_now is None:
        free = index.capacity_array().copy()
        np.subtract.at(free, nodes, amounts)
        free_now = FreePool.from_array(free, index.eligible, index.scale)
    return Occupancy(running, free_now)
