"""Work conservation, checked from the outside (issue #49): does an answer leave a queued job
waiting that fits now without touching any promise the answer reports?

Written from the snapshot and the answer alone, independently of the dispatchers' code (no
import of `hpcdispatch.server`): nodes, running work, the answer's starts and its promises, each
job for its requested time (the limit the workload manager enforces, as the promises are
computed):

- a running unit holds its amounts on its node until s_i + its requested time (at least t + 1);
- a job the answer starts holds its units' amounts on the nodes it was given over
  [t, t + requested time);
- a promise holds its job's units over [promised start, + requested time): on the nodes it was
  reported on, if the caller knows them, else anywhere (pooled).

A queued job j that did not start *fits now* when its rn_j units fit node by node, on up nodes,
into what stays free over all of [t, t + its requested time), and *touches no promise* when the
promises still fit with j in place: node-reported ones are exact (they are part of what is free),
pooled ones are shown to fit by a witness: every pooled promise placed node by node, in order of
its start, around j (tried on a few node orders). Only a witness counts, so a job reported here
leaves every promise its room for sure: each report is a real idle hole, never a guess. (A job
whose run ends before every pooled promise starts needs no witness.)

`in_order` is FCFS's guarantee (its order is its promise): only the oldest job that did not
start may start before the others, so only it is asked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hpcdispatch.snapshot import NodeState, QueuedJob, Snapshot

Amounts = Mapping[str, int]


@dataclass(frozen=True, slots=True)
class Promise:
    """A start an answer reports as protected: job id, absolute start, node of each unit (None:
    not reported, pooled)."""

    job_id: str
    start: int
    nodes: tuple[str, ...] | None = None


class _Cluster:
    """The up nodes (rows) by resource type (columns), and the blocks that hold them over
    time: (node, [start, end), amounts), held and released last in, first out."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.t = snapshot.time
        up = [n for n in snapshot.nodes if n.state == NodeState.UP]
        self.row = {n.id: k for k, n in enumerate(up)}
        self.ids = [n.id for n in up]
        self.types = sorted({r for n in snapshot.nodes for r in n.capacity}
                            | {r for q in snapshot.queued for r in q.unit_request})
        self.capacity = np.array([[n.capacity.get(r, 0) for r in self.types] for n in up],
                                 dtype=np.int64).reshape(len(up), len(self.types))
        self.blocks: list[tuple[int, int, int, npt.NDArray[np.int64]]] = []
        for job in snapshot.running:
            end = max(job.start_time + job.requested_time, self.t + 1)
            for unit in job.units:
                self.hold(unit.node_id, self.t, end, unit.amounts)

    def vector(self, amounts: Amounts) -> npt.NDArray[np.int64]:
        return np.array([amounts.get(r, 0) for r in self.types], dtype=np.int64)

    def hold(self, node: str, start: int, end: int, amounts: Amounts) -> None:
        """Hold `amounts` on `node` over [start, end) (a block on a node that is not up is
        kept too, holding nothing, so that releases pair with holds)."""
        self.blocks.append((self.row.get(node, -1), start, end, self.vector(amounts)))

    def hold_job(self, job: QueuedJob, start: int, nodes: Iterable[str]) -> None:
        for n in nodes:
            self.hold(n, start, start + job.requested_time, job.unit_request)

    def release_last(self, nodes: Sequence[str]) -> None:
        del self.blocks[len(self.blocks) - len(nodes):]

    def free_during(self, start: int, end: int) -> npt.NDArray[np.int64]:
        """What stays free on each up node over all of [start, end)."""
        during = [b for b in self.blocks if b[0] >= 0 and b[1] < end and start < b[2]]
        if not during:
            return self.capacity
        rows = np.array([b[0] for b in during])
        starts = np.array([b[1] for b in during])
        ends = np.array([b[2] for b in during])
        amounts = np.stack([b[3] for b in during])
        worst = np.zeros_like(self.capacity)
        for p in {start, *starts[starts > start].tolist()}:  # the use only rises at these
            cover = (starts <= p) & (p < ends)
            use = np.zeros_like(self.capacity)
            np.add.at(use, rows[cover], amounts[cover])
            np.maximum(worst, use, out=worst)
        return self.capacity - worst

    def units(self, free: npt.NDArray[np.int64], job: QueuedJob) -> npt.NDArray[np.int64]:
        """Units of `job` each node holds in `free`."""
        request = self.vector(job.unit_request)
        asked = request > 0
        if not asked.any():
            return np.full(len(free), 1 << 30, dtype=np.int64)
        return np.maximum(free[:, asked] // request[asked], 0).min(axis=1)

    def fitting(self, job: QueuedJob, start: int) -> npt.NDArray[np.int64]:
        """Units of `job` each up node holds over [start, start + its requested time)."""
        return self.units(self.free_during(start, start + job.requested_time), job)

    def empty_fit(self, job: QueuedJob) -> int:
        return int(self.units(self.capacity, job).sum())

    def choose(self, job: QueuedJob, start: int, fullest_first: bool) -> list[str] | None:
        """Nodes for `job`'s units from `start` (the fullest or the emptiest first), or None."""
        fit = self.fitting(job, start)
        if int(fit.sum()) < job.units:
            return None
        chosen: list[str] = []
        order = np.argsort(fit if fullest_first else -fit, kind="stable")
        for n in order[fit[order] > 0].tolist():
            chosen.extend([self.ids[n]] * min(int(fit[n]), job.units - len(chosen)))
            if len(chosen) == job.units:
                break
        return chosen


def _all_placed(cluster: _Cluster, pooled: list[tuple[int, QueuedJob]],
                fullest_first: bool) -> bool:
    """Whether every pooled promise fits node by node in order of its start (the cluster is
    left as it was)."""
    placed: list[list[str]] = []
    ok = True
    for start, job in pooled:
        nodes = cluster.choose(job, start, fullest_first)
        if nodes is None:
            ok = False
            break
        cluster.hold_job(job, start, nodes)
        placed.append(nodes)
    for nodes in reversed(placed):
        cluster.release_last(nodes)
    return ok


def idle_holes(
    snapshot: Snapshot,
    starts: Mapping[str, Sequence[str]],
    promises: Sequence[Promise] = (),
    in_order: bool = False,
) -> list[str]:
    """The queued jobs that did not start although they fit now for their requested time
    without touching any promise (module docstring); [] when the answer conserves work.
    `starts`: job id -> node of each unit, as answered."""
    cluster = _Cluster(snapshot)
    t = snapshot.time
    by_id = {q.id: q for q in snapshot.queued}
    for job_id, nodes in starts.items():
        cluster.hold_job(by_id[job_id], t, nodes)
    waiting = sorted((q for q in snapshot.queued if q.id not in starts),
                     key=lambda q: (q.submit_time, q.id))
    waiting = [q for q in waiting if cluster.empty_fit(q) >= q.units]  # may ever fit
    if in_order:
        waiting = waiting[:1]
    free_now = cluster.free_during(t, t + 1)
    holes = []
    for job in waiting:
        if int(cluster.units(free_now, job).sum()) < job.units:
            continue  # not even in what is free at t (the quick test of most jobs)
        if _fits_around(cluster, job, [p for p in promises if p.job_id != job.id], by_id):
            holes.append(job.id)
    return holes


def _fits_around(cluster: _Cluster, job: QueuedJob, promises: list[Promise],
                 by_id: Mapping[str, QueuedJob]) -> bool:
    t = cluster.t
    exact = [p for p in promises if p.nodes is not None and p.job_id in by_id]
    for p in exact:
        cluster.hold_job(by_id[p.job_id], max(p.start, t), p.nodes or ())
    try:
        if int(cluster.fitting(job, t).sum()) < job.units:
            return False
        pooled = sorted(((max(p.start, t), by_id[p.job_id]) for p in promises
                         if p.nodes is None and p.job_id in by_id),
                        key=lambda item: (item[0], item[1].submit_time, item[1].id))
        if not pooled or t + job.requested_time <= pooled[0][0]:
            return True  # j is gone before any pooled promise starts
        for fullest in (True, False):  # a witness: j's nodes, then every pooled promise
            nodes = cluster.choose(job, t, fullest)
            if nodes is None:
                continue
            cluster.hold_job(job, t, nodes)
            try:
                if any(_all_placed(cluster, pooled, f) for f in (True, False)):
                    return True
            finally:
                cluster.release_last(nodes)
        return False
    finally:
        for p in reversed(exact):
            cluster.release_last(p.nodes or ())
