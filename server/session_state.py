"""One session's cluster state, kept in memory between decisions and changed only by deltas.

The state is what a full snapshot would say at the session's time: the nodes (in the order
first seen), the running and queued jobs (in the order they entered), and the resources the
running jobs hold on each node. A delta is checked first (server/session_delta.py) and then
applied here as a whole; applying never fails, so a rejected delta leaves the state as it was.

A decision needs a Snapshot (its queue is copied; its running jobs are the cached view of the
state, see below) and, instead of a pass over every running job, the state's Occupancy: the
running rows, usage and free pool that `server/session_running.py` keeps up to date as deltas
apply. The node list's index is kept until a node changes. Running jobs the caller gave no
`expected_duration` are predicted once, at the first decision that sees them, and keep that
prediction (per predictor) for their life: the full-snapshot path predicts them again at every
decision, so the two differ only while a predictor learns.

The state also answers the independent decision check (`decision_check.ClusterFacts`) from its
own tables: the nodes, what running jobs hold per node (`used`), the queued jobs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping

from hpcdispatch.server.dispatchers.problem import NodeIndex, Occupancy, index_nodes
from hpcdispatch.server.pipeline import running_facts
from hpcdispatch.server.predictors.base import DurationPredictor, predict_many
from hpcdispatch.server.session_running import SessionRunning
from hpcdispatch.snapshot import Node, NodeState, QueuedJob, RunningJob, Snapshot

_NOTHING_HELD: Mapping[str, int] = {}


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
        # Running jobs with the duration a decision uses, per predictor kind (see module doc),
        # in the order of `running` (jobs enter both at the end and leave both together).
        self._predicted: dict[int, dict[str, RunningJob]] = {}
        self._node_tuple: tuple[Node, ...] | None = tuple(self.nodes)
        self._index: NodeIndex | None = index
        # The running work in the dispatchers' terms (made at the first decision).
        self._rows: SessionRunning | None = None

    # -- reading -------------------------------------------------------------------------------

    @property
    def resource_types(self) -> set[str]:
        """Every resource type some node has (the node index's, kept until a node changes)."""
        return set(self.node_index().resources)

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
        view = self._predict(predictor_kind, predictor)
        return Snapshot(
            time=self.time,
            nodes=self.node_tuple(),
            running=tuple(view.values()),
            queued=tuple(self.queued.values()),
        )

    def occupancy(self, predictor_kind: int, predictor: DurationPredictor) -> Occupancy:
        """What the running work makes of the nodes at the state's time, indexed by
        `node_index()`, with the durations `snapshot(predictor_kind, predictor)` gives; equal
        to `occupancy_from_snapshot` of that snapshot with the pipeline's durations."""
        self._predict(predictor_kind, predictor)
        index = self.node_index()
        rows = self._rows
        assert rows is not None
        if not rows.fits(index):  # new resource types: rows of another width
            rows = self._rows = self._new_rows(index)
        return rows.occupancy(index, self.time, predictor_kind)

    def _predict(self, predictor_kind: int, predictor: DurationPredictor) -> dict[str, RunningJob]:
        """The running jobs with `predictor_kind`'s durations, predicting the unseen ones."""
        if self._rows is None:
            self._rows = self._new_rows(self.node_index())
        view = self._predicted.setdefault(predictor_kind, {})
        missing = len(self.running) - len(view)
        if not missing:
            return view
        # The jobs a view has not seen are the last ones to have entered `running`: appended
        # in that order, the view stays in the order of `running`.
        unseen: list[RunningJob] = []
        for job in reversed(self.running.values()):
            if len(unseen) == missing:
                break
            unseen.append(job)
        unseen.reverse()
        in_order = not any(job.id in view for job in unseen)
        if not in_order:  # not expected; a full scan, and the view put in order below
            unseen = [r for r in self.running.values() if r.id not in view]
        unknown = [r for r in unseen if r.expected_duration is None]
        durations = predict_many(predictor, [running_facts(r) for r in unknown])
        predicted = dict(zip((r.id for r in unknown), durations, strict=True))
        for job in unseen:
            duration = predicted.get(job.id)
            view[job.id] = (
                job if duration is None else dataclasses.replace(job, expected_duration=duration)
            )
        self._rows.set_predictions(predictor_kind, predicted.items())
        if not in_order:
            view = self._predicted[predictor_kind] = {
                job_id: view[job_id] for job_id in self.running}
        return view

    def _new_rows(self, index: NodeIndex) -> SessionRunning:
        rows = SessionRunning(index, self.position, self.running.values())
        for kind, view in self._predicted.items():
            rows.set_predictions(kind, (
                (job_id, job.expected_duration) for job_id, job in view.items()
                if job.expected_duration is not None and self.running[job_id] is not job
            ))
        return rows

    # -- the independent check's facts (decision_check.ClusterFacts) --------------------------

    def known_nodes(self, node_ids: Collection[str]) -> dict[str, Node]:
        position, nodes = self.position, self.nodes
        return {n: nodes[position[n]] for n in node_ids if n in position}

    def held(self, node_ids: Collection[str]) -> dict[str, Mapping[str, int]]:
        return {n: self.used.get(n, _NOTHING_HELD) for n in node_ids}

    def queued_job(self, job_id: str) -> QueuedJob | None:
        return self.queued.get(job_id)

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
        if self._rows is not None:
            self._rows.nodes_changed()

    def end(self, job_ids: Iterable[str]) -> None:
        job_ids = list(job_ids)
        for job_id in job_ids:
            job = self.running.pop(job_id)
            self._hold(job, -1)
            for view in self._predicted.values():
                view.pop(job_id, None)
        if self._rows is not None:
            self._rows.end(job_ids)

    def cancel(self, job_ids: Iterable[str]) -> None:
        for job_id in job_ids:
            del self.queued[job_id]

    def submit(self, jobs: Iterable[QueuedJob]) -> None:
        for job in jobs:
            self.queued[job.id] = job

    def start(self, jobs: Iterable[RunningJob]) -> None:
        jobs = list(jobs)
        for job in jobs:
            self.queued.pop(job.id, None)
            self.running[job.id] = job
            self._hold(job, +1)
        if self._rows is not None:
            self._rows.start(jobs)

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
