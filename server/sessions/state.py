"""One session's cluster state, kept in memory between decisions and changed only by deltas.

The state is what a full snapshot would say at the session's time: the nodes (in the order
first seen), the running and queued jobs (in the order they entered), and the resources the
running jobs hold on each node. A delta is checked first (server/intake/session_delta.py) and then
applied here as a whole; applying never fails, so a rejected delta leaves the state as it was.

A decision needs a Snapshot (its queue is copied; its running jobs are the cached view of the
state, see below) and, instead of a pass over every running job, the state's Occupancy: the
running rows, usage and free pool that `server/sessions/running_work.py` keeps up to date as deltas
apply. The node list's index is kept until a node changes. Running jobs the caller gave no
`expected_duration` are predicted once, at the first decision that sees them, and keep that
prediction (per predictor) for their life: the full-snapshot path predicts them again at every
decision, so the two differ only while a predictor learns. Queued jobs' predictor inputs are
made once per job, and the answers of a predictor that reads the job alone (walltime, oracle)
are kept while the job waits (`queued_durations`); a predictor that learns is asked again at
every decision, as on the full-snapshot path.

The state also answers the independent decision check (`decision_check.ClusterFacts`) from its
own tables: the nodes, what running jobs hold per node (`used`), the queued jobs; for the rows
the check reads, the nodes' capacities and states are kept as arrays (`NodeFactsTable`, built at
the first check, changed node by node) and what running jobs hold is copied from `used` for
the nodes a check asks for whose usage changed since.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping, Sequence
from functools import partial
from itertools import repeat

import numpy as np

from hpcdispatch.decision_check import NodeRows
from hpcdispatch.snapshot import (
    Node,
    NodeState,
    QueuedJob,
    RunningJob,
    Snapshot,
    UnavailabilityWindow,
)

from ..domain.duration_predictor import (
    DurationPredictor,
    JobFacts,
    depends_on_job_only,
    predict_many,
)
from ..domain.node_index import NodeIndex, index_nodes
from ..domain.occupancy import Occupancy
from ..pipeline import Situation, queued_facts, running_facts
from .running_work import SessionRunning

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
        self.unavailability: tuple[UnavailabilityWindow, ...] = snapshot.windows
        # Resources held by running jobs, per node id (only nodes holding something).
        self.used: dict[str, dict[str, int]] = {}
        self.held_units = 0  # units of all running jobs (the delta check's max_total_units)
        # The check's node facts as arrays (made at the first check).
        self._facts: NodeFactsTable | None = None
        self._hold(snapshot.running, +1)
        # Running jobs with the duration a decision uses, per predictor kind (see module doc),
        # in the order of `running` (jobs enter both at the end and leave both together).
        self._predicted: dict[int, dict[str, RunningJob]] = {}
        # The queued jobs' predictor inputs, and the d_i of predictors that read the job alone
        # (with the predictor that made them), made once per job (see `queued_durations`).
        self._queued_facts: dict[str, JobFacts] = {}
        self._queued_predicted: dict[int, tuple[DurationPredictor, dict[str, int]]] = {}
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
            windows=self.unavailability,
        )

    def situation(self, predictor_kind: int, predictor: DurationPredictor) -> Situation:
        """What a decision on the state as it is now is made on: its snapshot with the
        durations of `predictor`, its occupancy, its facts for the check, its queued jobs'
        durations."""
        return Situation(
            snapshot=self.snapshot(predictor_kind, predictor), nodes=self.node_index(),
            occupancy=self.occupancy(predictor_kind, predictor), facts=self,
            queued_durations=partial(self.queued_durations, predictor_kind, predictor),
        )

    def queued_durations(self, predictor_kind: int, predictor: DurationPredictor) -> dict[str, int]:
        """d_i of every queued job by id, as `pipeline.predict_durations` predicts them: one
        batch, from each job's predictor inputs made once; a predictor whose d_i depends on
        the job alone (`depends_on_job_only`) is asked only about jobs it has not seen."""
        facts = self._queued_facts
        unseen = [job for job_id, job in self.queued.items() if job_id not in facts]
        facts.update((job.id, queued_facts(job)) for job in unseen)
        if not depends_on_job_only(predictor):
            return dict(zip(self.queued, predict_many(predictor, [facts[j] for j in self.queued]),
                            strict=True))
        kept = self._queued_predicted.get(predictor_kind)
        if kept is None or kept[0] is not predictor:
            kept = self._queued_predicted[predictor_kind] = (predictor, {})
        known = kept[1]
        new = [job_id for job_id in self.queued if job_id not in known]
        known.update(zip(new, predict_many(predictor, [facts[j] for j in new]), strict=True))
        return {job_id: known[job_id] for job_id in self.queued}

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
        """What the running jobs hold in all, per resource type, on each of `node_ids`."""
        return {n: self.used.get(n, _NOTHING_HELD) for n in node_ids}

    def node_rows(self, node_ids: Sequence[str]) -> NodeRows:
        table = self._facts
        if table is None or not table.refresh(node_ids, self.position, self.used):
            table = self._facts = NodeFactsTable(self.nodes, self.used)
            fresh = table.refresh(node_ids, self.position, self.used)
            assert fresh, "a new table has a column for every resource type held"
        return table.rows(node_ids, self.position)

    def queued_job(self, job_id: str) -> QueuedJob | None:
        return self.queued.get(job_id)

    def windows(self) -> tuple[UnavailabilityWindow, ...]:
        return self.unavailability

    # -- changing (only after session_delta has accepted the delta) ---------------------------

    def apply(
        self, time: int, sequence: int,
        node_changes: Iterable[tuple[str, NodeState, Mapping[str, int] | None,
                                     tuple[tuple[str, ...], tuple[str, ...]] | None]] = (),
        ended: Iterable[str] = (), cancelled: Iterable[str] = (),
        submitted: Iterable[QueuedJob] = (), started: Iterable[RunningJob] = (),
        windows: tuple[UnavailabilityWindow, ...] | None = None,
    ) -> None:
        """Apply one accepted delta whole, in the contract's order (node changes, ended,
        cancelled, submitted, started; then the windows, unless None); the state is then at
        `time` and `sequence`."""
        for node_id, node_state, capacity, labels in node_changes:
            self.set_node(node_id, node_state, capacity, labels)
        self.end(ended)
        self.cancel(cancelled)
        self.submit(submitted)
        self.start(started)
        if windows is not None:
            self.unavailability = windows
        self.time = time
        self.sequence = sequence

    def set_node(self, node_id: str, state: NodeState, capacity: Mapping[str, int] | None,
                 labels: tuple[tuple[str, ...], tuple[str, ...]] | None = None) -> None:
        """Change a node's state (and capacity, and partitions and features, unless None), or
        append a new node."""
        at = self.position.get(node_id)
        if at is None:
            assert capacity is not None, "a new node needs a capacity"
            self.position[node_id] = len(self.nodes)
            self.nodes.append(Node(node_id, state, dict(capacity), *(labels or ((), ()))))
        else:
            old = self.nodes[at]
            partitions, features = labels or (old.partitions, old.features)
            self.nodes[at] = Node(node_id, state, dict(capacity) if capacity else old.capacity,
                                  partitions, features)
        if self._facts is not None and (at is None or not self._facts.set_node(at, self.nodes[at])):
            self._facts = None  # a new node, or a new resource type: built again when asked
        self._node_tuple = None
        self._index = None
        if self._rows is not None:
            self._rows.nodes_changed()

    def end(self, job_ids: Iterable[str]) -> None:
        job_ids = list(job_ids)
        self._hold([self.running.pop(job_id) for job_id in job_ids], -1)
        for view in self._predicted.values():
            for job_id in job_ids:
                view.pop(job_id, None)
        if self._rows is not None:
            self._rows.end(job_ids)

    def cancel(self, job_ids: Iterable[str]) -> None:
        for job_id in job_ids:
            del self.queued[job_id]
            self._forget_queued(job_id)

    def submit(self, jobs: Iterable[QueuedJob]) -> None:
        for job in jobs:
            self.queued[job.id] = job
            self._forget_queued(job.id)

    def start(self, jobs: Iterable[RunningJob]) -> None:
        jobs = list(jobs)
        for job in jobs:
            self.queued.pop(job.id, None)
            self._forget_queued(job.id)
            self.running[job.id] = job
        self._hold(jobs, +1)
        if self._rows is not None:
            self._rows.start(jobs)

    def hold_promises(self, promised: Iterable[tuple[str, int, str]]) -> None:
        """Keep with their jobs the promises a decision on the state reported (job id, start,
        token), as a caller sending them back would: the next decision finds each job's
        latest promise, never the one it was submitted with once the promise has moved."""
        queued = self.queued
        for job_id, start, token in promised:
            job = queued.get(job_id)
            if job is not None and (job.promised_start, job.promise_token) != (start, token):
                queued[job_id] = dataclasses.replace(job, promised_start=start,
                                                     promise_token=token)

    def _forget_queued(self, job_id: str) -> None:
        """Drop what was kept of a queued job that left the queue (or was replaced)."""
        self._queued_facts.pop(job_id, None)
        for _, known in self._queued_predicted.values():
            known.pop(job_id, None)

    def _hold(self, jobs: Iterable[RunningJob], sign: int) -> None:
        """Add (`sign` +1) or take back (-1) what `jobs` hold on each node in `used`."""
        used = self.used
        touched: list[str] = []
        for job in jobs:
            self.held_units += sign * len(job.units)
            for unit in job.units:
                node_id = unit.node_id
                touched.append(node_id)
                held = used.get(node_id)
                if held is None:
                    held = used[node_id] = {}
                for resource, amount in unit.amounts.items():
                    if amount:
                        left = held.get(resource, 0) + sign * amount
                        if left:
                            held[resource] = left
                        else:  # it was held (amount is not 0)
                            del held[resource]
                if not held:
                    del used[node_id]
        if self._facts is not None:
            self._facts.stale.update(touched)


class NodeFactsTable:
    """The independent check's facts of every node of a session as arrays, one row per node
    in the session's node order: capacity, up or not, and what the running jobs hold, copied
    from the session's `used` when a check asks for a node whose usage changed (`stale`)."""

    def __init__(self, nodes: Sequence[Node], used: Mapping[str, Mapping[str, int]]) -> None:
        self.resources = tuple(sorted(
            {r for n in nodes for r in n.capacity} | {r for h in used.values() for r in h}))
        self.column = {r: j for j, r in enumerate(self.resources)}
        self.capacity = np.zeros((len(nodes), len(self.resources)), dtype=np.int64)
        for j, resource in enumerate(self.resources):
            self.capacity[:, j] = np.fromiter(
                (n.capacity.get(resource, 0) for n in nodes), dtype=np.int64, count=len(nodes))
        self.up = np.array([n.state is NodeState.UP for n in nodes], dtype=bool)
        self.held = np.zeros_like(self.capacity)
        self.stale: set[str] = set(used)  # nodes whose row of `held` is not up to date

    def set_node(self, at: int, node: Node) -> bool:
        """Row `at` is now `node`; False (nothing changed) when it has a resource type the
        table has no column for."""
        if not node.capacity.keys() <= self.column.keys():
            return False
        self.capacity[at] = [node.capacity.get(r, 0) for r in self.resources]
        self.up[at] = node.state is NodeState.UP
        return True

    def refresh(self, node_ids: Collection[str], position: Mapping[str, int],
                used: Mapping[str, Mapping[str, int]]) -> bool:
        """Bring the held rows of `node_ids` up to date; False when a node holds a resource
        type the table has no column for."""
        changed = self.stale.intersection(node_ids)
        for node_id in changed:
            held = used.get(node_id, _NOTHING_HELD)
            if not held.keys() <= self.column.keys():
                return False
            at = position.get(node_id)
            if at is not None:  # (an unknown node has no row)
                self.held[at] = [held.get(r, 0) for r in self.resources]
        self.stale.difference_update(changed)
        return True

    def rows(self, node_ids: Sequence[str], position: Mapping[str, int]) -> NodeRows:
        """The rows of `node_ids` (whose held rows are up to date, see `refresh`)."""
        at = np.fromiter(map(position.get, node_ids, repeat(-1)), dtype=np.int64,
                         count=len(node_ids))
        known = at >= 0
        if known.all():
            return NodeRows(self.resources, known, self.up[at], self.capacity[at],
                            self.held[at])
        if not len(self.up):  # no nodes at all
            nothing = np.zeros((len(at), len(self.resources)), dtype=np.int64)
            return NodeRows(self.resources, known, known.copy(), nothing, nothing.copy())
        at = np.where(known, at, 0)
        keep = known[:, None]
        return NodeRows(self.resources, known, self.up[at] & known, self.capacity[at] * keep,
                        self.held[at] * keep)
