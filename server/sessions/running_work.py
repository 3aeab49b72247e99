"""A session's running work in the dispatchers' terms, kept up to date by its deltas.

What `occupancy_from_snapshot` computes from every running job at each full-snapshot decision,
a session keeps between decisions: one row per (running job, node it holds), in the order the
jobs entered the session (the order of the session's snapshot), with the job's start, requested
time and predicted duration; what the rows hold per node (`used`); and the free pool of the
nodes (capacity minus used), changed node by node. A delta costs what it changes (plus a copy
of the row columns), and a decision costs a few vector operations over the rows to turn
durations into ends at its t, instead of a pass in Python over every running job's units.

A node change (state, capacity, a new node) makes the pool be built again at the next decision
(the node index is rebuilt then too); one that changes the set of resource types rebuilds the
rows as well.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import numpy.typing as npt

from hpcdispatch.snapshot import RunningJob

from ..domain.free_pool import FreePool
from ..domain.node_index import NodeIndex
from ..domain.occupancy import (
    MAX_MODEL_DURATION,
    Occupancy,
    limit_ends,
    occupancy_of_rows,
    running_rows,
)

# Per-job columns grow by this factor when full.
_GROWTH = 2
# A duration or prediction not known yet.
UNKNOWN = -1


class SessionRunning:
    """The running rows, per-node usage and free pool of a session (not thread-safe)."""

    def __init__(self, index: NodeIndex, position: Mapping[str, int],
                 jobs: Iterable[RunningJob]) -> None:
        """`position`: node id -> node index, kept up to date by the session as nodes are
        added; `jobs`: the running jobs, in session order."""
        self.resources = index.resources
        self.position = position
        width = len(self.resources)
        # Rows: the node, what the job holds there, the job's slot in the per-job columns.
        self.nodes: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self.amounts: npt.NDArray[np.int64] = np.zeros((0, width), dtype=np.int64)
        self.slots: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        # Per-job columns, by slot; slots of ended jobs are reused.
        self.slot_of: dict[str, int] = {}
        self._free_slots: list[int] = []
        self._slots_made = 0
        self.start_time = np.zeros(16, dtype=np.int64)
        self.requested = np.zeros(16, dtype=np.int64)
        self.expected = np.full(16, UNKNOWN, dtype=np.int64)  # the caller's, else UNKNOWN
        self.predicted: dict[int, npt.NDArray[np.int64]] = {}  # per predictor kind
        self.used = np.zeros((len(index.capacity), width), dtype=np.int64)
        self._index = index
        self._pool: FreePool | None = None
        # Nodes whose free vector changed since the pool was last read: put in it once, at
        # the next decision (a delta that ends and starts jobs on a node sets it once).
        self._touched: list[npt.NDArray[np.int64]] = []
        self.start(jobs)

    # -- changes -----------------------------------------------------------------------------

    def start(self, jobs: Iterable[RunningJob]) -> None:
        """Jobs that entered the running set, appended in order."""
        batch = list(jobs)
        if not batch:
            return
        slots = np.asarray([self._new_slot(job) for job in batch], dtype=np.int64)
        new_nodes, new_amounts, owner = running_rows(batch, self.position, self.resources)
        self.nodes = np.concatenate((self.nodes, new_nodes))
        self.amounts = np.concatenate((self.amounts, new_amounts))
        self.slots = np.concatenate((self.slots, slots[owner]))
        if len(new_nodes):
            self._grow_used(int(new_nodes.max()) + 1)
            np.add.at(self.used, new_nodes, new_amounts)
            self._refresh(new_nodes)

    def end(self, job_ids: Iterable[str]) -> None:
        """Running jobs that ended: their rows go, their resources are free again."""
        gone = [self.slot_of.pop(job_id) for job_id in job_ids]
        if not gone:
            return
        # The rows of the ended slots, by a mask over the slots (np.isin sorts both sides).
        gone_slot = np.zeros(len(self.start_time), dtype=bool)
        gone_slot[gone] = True
        ended = gone_slot[self.slots]
        old_nodes, old_amounts = self.nodes[ended], self.amounts[ended]
        keep = ~ended
        # New arrays, never changed in place: a Problem may still hold the old ones.
        self.nodes, self.amounts, self.slots = self.nodes[keep], self.amounts[keep], self.slots[
            keep]
        np.subtract.at(self.used, old_nodes, old_amounts)
        for slot in gone:
            self.expected[slot] = UNKNOWN
            for column in self.predicted.values():
                column[slot] = UNKNOWN
        self._free_slots.extend(gone)
        self._refresh(old_nodes)

    def nodes_changed(self) -> None:
        """A node changed state or capacity, or was added: the pool is built again at the next
        decision, from that decision's node index."""
        self._pool = None
        self._touched.clear()

    def fits(self, index: NodeIndex) -> bool:
        """Whether these rows can serve node list `index` (same resource types)."""
        return index.resources == self.resources

    def set_predictions(self, kind: int, durations: Iterable[tuple[str, int]]) -> None:
        """Record predictor `kind`'s duration of running jobs (job id, seconds)."""
        column = self.predicted.get(kind)
        if column is None:
            column = self.predicted[kind] = np.full(len(self.start_time), UNKNOWN,
                                                    dtype=np.int64)
        for job_id, duration in durations:
            column[self.slot_of[job_id]] = duration

    # -- a decision --------------------------------------------------------------------------

    def occupancy(self, index: NodeIndex, t: int, kind: int) -> Occupancy:
        """The Occupancy at t on node list `index` (see `fits`) with predictor `kind`'s
        durations (every running job without a caller's expected duration must have one: see
        `set_predictions`).

        d_i is the caller's expected duration, else the prediction, corrected upwards to the
        requested time once the job has outlived it (pipeline.corrected_duration); the row's
        end is max(1, s_i + d_i - t), at most MAX_MODEL_DURATION (as occupancy_from_snapshot).
        """
        slots = self.slots
        expected = self.expected[slots]
        predicted = self.predicted.get(kind)
        guess = expected if predicted is None else np.where(
            expected != UNKNOWN, expected, predicted[slots])
        if np.any(guess == UNKNOWN):
            raise AssertionError("a running job has no duration for this predictor")
        start = self.start_time[slots]
        outlived = start + guess <= t
        duration = np.where(outlived, np.maximum(guess, self.requested[slots]), guess)
        # (np.minimum / np.maximum: np.clip's own checks cost more than the clip on small rows)
        ends = np.minimum(np.maximum(start + duration - t, 1), MAX_MODEL_DURATION)
        limits = limit_ends(start, duration, self.requested[slots], t)
        if index is not self._index:
            assert self.fits(index), "the resource types changed: rebuild the rows"
            self._index = index
            self._pool = None
            self._touched.clear()
            self._grow_used(len(index.capacity))
        # Handed to the Problem as they are: never changed in place (changes make new arrays).
        self.nodes.flags.writeable = False
        self.amounts.flags.writeable = False
        return occupancy_of_rows(index, self.nodes, self.amounts, ends, self.pool(), limits)

    def pool(self) -> FreePool:
        """Free on each node now (capacity minus used), groups listed by their first node."""
        if self._pool is None:
            index = self._index
            self._pool = FreePool.from_array(
                index.capacity_array() - self.used[: len(index.capacity)], index.eligible,
                index.scale)
            self._touched.clear()
        elif self._touched:
            self._put_touched(self._pool)
        return self._pool.in_node_order()

    # -- inside ------------------------------------------------------------------------------

    def _new_slot(self, job: RunningJob) -> int:
        if self._free_slots:
            slot = self._free_slots.pop()
        else:
            slot = self._slots_made
            self._slots_made += 1
            if slot >= len(self.start_time):
                self._grow_slots(_GROWTH * len(self.start_time))
        self.slot_of[job.id] = slot
        self.start_time[slot] = job.start_time
        self.requested[slot] = job.requested_time
        self.expected[slot] = (
            job.expected_duration if job.expected_duration is not None else UNKNOWN)
        return slot

    def _grow_slots(self, size: int) -> None:
        def grown(column: npt.NDArray[np.int64], fill: int) -> npt.NDArray[np.int64]:
            more = np.full(size, fill, dtype=np.int64)
            more[: len(column)] = column
            return more

        self.start_time = grown(self.start_time, 0)
        self.requested = grown(self.requested, 0)
        self.expected = grown(self.expected, UNKNOWN)
        self.predicted = {k: grown(c, UNKNOWN) for k, c in self.predicted.items()}

    def _grow_used(self, nodes: int) -> None:
        if nodes > len(self.used):
            more = np.zeros((nodes, len(self.resources)), dtype=np.int64)
            more[: len(self.used)] = self.used
            self.used = more

    def _refresh(self, nodes: npt.NDArray[np.int64]) -> None:
        """The free vector of each of `nodes` changed: put in the pool at its next reading."""
        if self._pool is not None:
            self._touched.append(nodes)

    def _put_touched(self, pool: FreePool) -> None:
        """Put the free vector of each touched node in the pool again."""
        touched = self._touched
        changed = np.unique(touched[0] if len(touched) == 1 else np.concatenate(touched))
        touched.clear()
        free = self._index.capacity_array()[changed] - self.used[changed]
        for n, vec in zip(changed.tolist(), free.tolist(), strict=True):
            pool.set(n, tuple(vec))
