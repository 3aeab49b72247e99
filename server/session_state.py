"""One session's cluster state, kept in memory between decisions and changed only by deltas.

The state is what a full snapshot would say at the session's time: the nodes (in the order
first seen), the running and queued jobs (in the order they entered), and the resources the
running jobs hold on each node. A delta is checked first (server/session_delta.py) and then
applied here as a whole; applying never fails, so a rejected delta leaves the state as it was.

A decision needs a Snapshot; building it from the state costs a pass over the job tables (no
parsing, no validation), and the node list's index is kept until a node changes. Running jobs
the caller gave no `expected_duration` are predicted once, at the first decision that sees
them, and keep that prediction (per predictor) for their life: the full-snapshot path predicts
them again at every decision, so the two differ only while a predictor learns.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from hpcdispatch.server.dispatchers.problem import NodeIndex, index_nodes
from hpcdispatch.server.pipeline import running_facts
from hpcdispatch.server.predictors.base import DurationPredictor, predict_many
from hpcdispatch.snapshot import Node, NodeState, QueuedJob, RunningJob, Snapshot


class SessionState:
    """The cluster as the session's deltas left it (not thread-safe: the store locks it)."""

    def __init__(self, cluster: str, snapshot: Snapshot, index: NodeIndex | None = None) -> None:
        """`index`: `index_nodes(snapshot.nodes)` when the caller already has it."""
        self.cluster = cluster
        self.time = snapshot.time
        self.sequence = 0
        self.nodes: list[Node] = list(snapshot.nodes)
        self.position: dict[str, int] = {n.id: i for i, n in enumerate(self.nodes)}
        self.running: dict[str, RunningJob] = {r.id: r for r in snapshot.running}
        self.queued: dict[str, QueuedJob] = {q.id: q for q in snapshot.queued}
        # Resources held by running jobs, per node id (only nodes holding something).
        self.used: dict[str, dict[str, int]] = {}
        for job in snapshot.running:
            self._hold(job, +1)
        # Running jobs with the duration a decision uses, per predictor kind (see module doc).
        self._predicted: dict[int, dict[str, RunningJob]] = {}
        self._node_tuple: tuple[Node, ...] | None = tuple(self.nodes)
        self._index: NodeIndex | None = index

    # -- reading -------------------------------------------------------------------------------

    @property
    def resource_types(self) -> set[str]:
        return {r for n in self.nodes for r in n.capacity}

    def node_index(self) -> NodeIndex:
        if self._index is None:
            self._index = index_nodes(self.node_tuple())
        return self._index

    def node_tuple(self) -> tuple[Node, ...]:
        if self._node_tuple is None:
            self._node_tuple = tuple(self.nodes)
        return self._node_tuple

    def snapshot(self, predictor_kind: int, predictor: DurationPredictor) -> Snapshot:
        """The state as a Snapshot; running jobs without expected_duration carry the cached
        prediction of `predictor` (made now for those it has not seen yet)."""
        view = self._predicted.setdefault(predictor_kind, {})
        unseen = [r for r in self.running.values() if r.id not in view]
        unknown = [r for r in unseen if r.expected_duration is None]
        durations = predict_many(predictor, [running_facts(r) for r in unknown])
        for job, duration in zip(unknown, durations, strict=True):
            view[job.id] = dataclasses.replace(job, expected_duration=duration)
        for job in unseen:
            if job.expected_duration is not None:
                view[job.id] = job
        return Snapshot(
            time=self.time,
            nodes=self.node_tuple(),
            running=tuple(view[job_id] for job_id in self.running),
            queued=tuple(self.queued.values()),
        )

    # -- changing (only after session_delta has accepted the delta) ---------------------------

    def set_node(self, node_id: str, state: NodeState, capacity: Mapping[str, int] | None) -> None:
        """Change a node's state (and capacity unless None), or append a new node."""
        at = self.position.get(node_id)
        if at is None:
            assert capacity is not None, "a new node needs a capacity"
            self.position[node_id] = len(self.nodes)
            self.nodes.append(Node(node_id, state, dict(capacity)))
        else:
            old = self.nodes[at]
            self.nodes[at] = Node(node_id, state, dict(capacity) if capacity else old.capacity)
        self._node_tuple = None
        self._index = None

    def end(self, job_ids: Iterable[str]) -> None:
        for job_id in job_ids:
            job = self.running.pop(job_id)
            self._hold(job, -1)
            for view in self._predicted.values():
                view.pop(job_id, None)

    def cancel(self, job_ids: Iterable[str]) -> None:
        for job_id in job_ids:
            del self.queued[job_id]

    def submit(self, jobs: Iterable[QueuedJob]) -> None:
        for job in jobs:
            self.queued[job.id] = job

    def start(self, jobs: Iterable[RunningJob]) -> None:
        for job in jobs:
            self.queued.pop(job.id, None)
            self.running[job.id] = job
            self._hold(job, +1)

    def _hold(self, job: RunningJob, sign: int) -> None:
        for unit in job.units:
            held = self.used.setdefault(unit.node_id, {})
            for resource, amount in unit.amounts.items():
                if amount:
                    left = held.get(resource, 0) + sign * amount
                    if left:
                        held[resource] = left
                    else:
                        held.pop(resource, None)
            if not held:
                del self.used[unit.node_id]
