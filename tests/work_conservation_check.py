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
from dataclasses import dataclass, field

from hpcdispatch.snapshot import NodeState, QueuedJob, Snapshot

Amounts = Mapping[str, int]


@dataclass(frozen=True, slots=True)
class Promise:
    """A start an answer reports as protected: job id, absolute start, node of each unit (None:
    not reported, pooled)."""

    job_id: str
    start: int
    nodes: tuple[str, ...] | None = None


@dataclass(slots=True)
class _Node:
    capacity: dict[str, int]
    blocks: list[tuple[int, int, dict[str, int]]] = field(default_factory=list)  # [s, e), use

    def free_during(self, start: int, end: int) -> dict[str, int]:
        """What stays free on this node over all of [start, end)."""
        during = [b for b in self.blocks if b[0] < end and start < b[1]]
        if not during:
            return self.capacity
        points = {start, *(s for s, _, _ in during if s > start)}
        worst = dict.fromkeys(self.capacity, 0)
        for p in points:
            use = dict.fromkeys(self.capacity, 0)
            for s, e, amounts in during:
                if s <= p < e:
                    for r, a in amounts.items():
                        use[r] = use.get(r, 0) + a
            for r in worst:
                worst[r] = max(worst[r], use.get(r, 0))
        return {r: c - worst[r] for r, c in self.capacity.items()}


def _units_fitting(free: Mapping[str, int], request: Amounts) -> int:
    counts = [free.get(r, 0) // a for r, a in request.items() if a > 0]
    return max(0, min(counts)) if counts else 1 << 30


def _scaled(request: Amounts, k: int) -> dict[str, int]:
    return {r: k * a for r, a in request.items()}


class _Cluster:
    """The up nodes and what holds them over time."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.t = snapshot.time
        self.nodes = {n.id: _Node(dict(n.capacity)) for n in snapshot.nodes
                      if n.state == NodeState.UP}
        for job in snapshot.running:
            end = max(job.start_time + job.requested_time, self.t + 1)
            for unit in job.units:
                self.hold(unit.node_id, self.t, end, unit.amounts)

    def hold(self, node: str, start: int, end: int, amounts: Amounts) -> None:
        if node in self.nodes:
            self.nodes[node].blocks.append((start, end, dict(amounts)))

    def hold_job(self, job: QueuedJob, start: int, nodes: Iterable[str]) -> None:
        for n in nodes:
            self.hold(n, start, start + job.requested_time, job.unit_request)

    def release_last(self, nodes: Iterable[str]) -> None:
        for n in nodes:
            if n in self.nodes:
                self.nodes[n].blocks.pop()

    def fitting(self, job: QueuedJob, start: int) -> dict[str, int]:
        """Units of `job` each up node holds over [start, start + its requested time)."""
        end = start + job.requested_time
        return {n: k for n, node in self.nodes.items()
                if (k := _units_fitting(node.free_during(start, end), job.unit_request)) > 0}

    def empty_fit(self, job: QueuedJob) -> int:
        return sum(_units_fitting(n.capacity, job.unit_request) for n in self.nodes.values())

    def choose(self, job: QueuedJob, start: int, fullest_first: bool) -> list[str] | None:
        """Nodes for `job`'s units from `start` (the fullest or the emptiest first), or None."""
        fit = self.fitting(job, start)
        if sum(fit.values()) < job.units:
            return None
        chosen: list[str] = []
        for n in sorted(fit, key=lambda n: (fit[n] if fullest_first else -fit[n], n)):
            chosen.extend([n] * min(fit[n], job.units - len(chosen)))
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
    free_now = [node.free_during(t, t + 1) for node in cluster.nodes.values()]
    holes = []
    for job in waiting:
        if sum(_units_fitting(f, job.unit_request) for f in free_now) < job.units:
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
        if sum(cluster.fitting(job, t).values()) < job.units:
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
