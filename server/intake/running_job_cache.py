"""Running jobs checked and converted once, reused while their bytes stay the same.

Consecutive snapshots of one cluster share almost all their running jobs: a job that started
keeps its message until it ends. Checking and converting 70,000 running jobs field by field
costs most of a 100,000-node Dispatch; serializing each job (protobuf's C code) and looking its
bytes up costs a small fraction. A job is reused only when its bytes are identical, so it is
the same job as the one checked before: what `check_running_job` checked depends on those bytes
alone. What depends on the rest of the snapshot (its node exists, the capacity its node has
left, its id unique, its start not after the snapshot's time) is checked again for the whole
snapshot, every time (server/intake/snapshot_intake.py).

The cache keeps, per cluster, the jobs of that cluster's last snapshot only; clusters beyond
`max_clusters`, or beyond `max_jobs` jobs in all, are forgotten least recently used first.
Lookups read a published map that is never modified (a request publishes a new one), so
concurrent decisions of one cluster need the lock only to swap maps.
"""

from __future__ import annotations

import operator
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from hpcdispatch.snapshot import RunningJob, UnitAllocation
from hpcdispatch.v1 import dispatcher_pb2 as pb

from ..config import ServerConfig
from .fields import DEFAULT_LIMITS, MAX_AMOUNT, MAX_DURATION, MAX_TIME
from .interruption import NEVER, Interruption
from .jobs import job_texts_within

_DETERMINISTIC_BYTES = operator.methodcaller("SerializeToString", deterministic=True)

MAX_CACHED_JOBS = 400_000  # two snapshots at the default max_jobs
MAX_CLUSTERS = 16


@dataclass(slots=True)
class CheckedRunningJob:
    """A running job that passed every check of its own, converted, with what it holds.

    `held_*` are parallel: one item per (unit, resource type) with an amount > 0, the only
    amounts the snapshot's capacity check counts. All fields but `cells` are never changed.
    `cells` memoizes where those amounts fall in one node table's capacity matrix (see
    snapshot_intake.held_cells): the table (an object the memo keeps alive, compared by
    identity) and the cells, or None when a unit is on a node the table does not have. It is
    replaced as a whole, so a concurrent reader sees one table's cells or another's.
    """

    job: RunningJob
    unit_nodes: tuple[str, ...]  # the node of every unit
    held_nodes: tuple[str, ...]
    held_types: tuple[str, ...]
    held_amounts: tuple[int, ...]
    cells: tuple[object, tuple[int, ...] | None] | None = None


def check_running_job(
    msg: pb.RunningJob, config: ServerConfig = DEFAULT_LIMITS
) -> CheckedRunningJob | None:
    """The job converted, if nothing is wrong with it on its own; None otherwise.

    On its own, a running job needs an id, texts and units within `config`'s limits (checked
    first: a job beyond them is not converted), a start time within ±2^40 s, requested and
    expected durations in (0, 2^31] s, at least one unit, and amounts >= 0. An amount beyond
    2^40 (more than any node's capacity, so the snapshot is invalid anyway) is refused here
    too, which keeps the snapshot's capacity sums inside int64. None means the full validation
    (server/intake/validation.py) will name what is wrong.
    """
    if not msg.id or abs(msg.start_time) > MAX_TIME:
        return None
    if len(msg.units) > config.max_units or not job_texts_within(msg, config):
        return None
    if not 0 < msg.requested_time <= MAX_DURATION:
        return None
    expected: int | None = None
    if msg.HasField("expected_duration"):
        expected = msg.expected_duration
        if not 0 < expected <= MAX_DURATION:
            return None
    if not msg.units:
        return None
    units: list[UnitAllocation] = []
    held_nodes: list[str] = []
    held_types: list[str] = []
    held_amounts: list[int] = []
    id_chars, types = config.max_id_chars, config.max_resource_types
    for unit in msg.units:
        node_id, amounts = unit.node_id, dict(unit.amounts)
        if len(node_id) > id_chars or len(amounts) > types:
            return None
        for resource, amount in amounts.items():
            if len(resource) > id_chars:
                return None
            if amount > 0:
                if amount > MAX_AMOUNT:
                    return None
                held_nodes.append(node_id)
                held_types.append(resource)
                held_amounts.append(amount)
            elif amount < 0:
                return None
        units.append(UnitAllocation(node_id, amounts))
    job = RunningJob(
        id=msg.id, user=msg.user, name=msg.name, start_time=msg.start_time,
        requested_time=msg.requested_time, expected_duration=expected, units=tuple(units),
    )
    return CheckedRunningJob(job, tuple(u.node_id for u in units), tuple(held_nodes),
                             tuple(held_types), tuple(held_amounts))


class RunningJobCache:
    """Checked running jobs by their serialized bytes, per cluster (thread-safe)."""

    def __init__(self, max_jobs: int = MAX_CACHED_JOBS, max_clusters: int = MAX_CLUSTERS) -> None:
        self.max_jobs = max_jobs
        self.max_clusters = max_clusters
        self._clusters: OrderedDict[str, dict[bytes, CheckedRunningJob]] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def __len__(self) -> int:
        """Jobs held, over all clusters."""
        with self._lock:
            return sum(len(jobs) for jobs in self._clusters.values())

    def lookup(
        self, cluster: str, jobs: Sequence[pb.RunningJob],
        config: ServerConfig = DEFAULT_LIMITS, interruption: Interruption = NEVER,
    ) -> list[CheckedRunningJob | None]:
        """Each job checked (None: something is wrong with it on its own, or the jobs hold
        more units than `max_total_units` in all: the jobs from there on are not converted),
        reusing the jobs of the cluster's previous snapshot whose bytes are identical; then
        the cluster keeps this snapshot's jobs instead (not when beyond the limit)."""
        # Deterministic bytes (map entries in key order): the same job parsed from two
        # requests may otherwise serialize its `amounts` in another order and miss.
        keys = list(map(_DETERMINISTIC_BYTES, jobs))
        with self._lock:
            known = self._clusters.get(cluster, {})
        found = list(map(known.get, keys))
        missed = units = 0
        if None in found:
            for i, entry in enumerate(found):
                if entry is None:
                    units += len(jobs[i].units)
                    if units > config.max_total_units:
                        return found  # beyond the limit: the rest is not converted
                    interruption.tick(1 + len(jobs[i].units))
                    found[i] = check_running_job(jobs[i], config)
                    missed += 1
        if missed == 0 and len(keys) == len(known):
            current = known  # the same jobs: the published map stays
        else:
            current = {k: e for k, e in zip(keys, found, strict=True) if e is not None}
        self._publish(cluster, current, hits=len(keys) - missed, misses=missed)
        return found

    def _publish(
        self, cluster: str, jobs: dict[bytes, CheckedRunningJob], hits: int, misses: int
    ) -> None:
        with self._lock:
            self.hits += hits
            self.misses += misses
            self._clusters.pop(cluster, None)
            if len(jobs) > self.max_jobs:
                return  # one snapshot larger than the whole cache: not kept
            self._clusters[cluster] = jobs  # most recently used last
            total = sum(len(j) for j in self._clusters.values())
            while len(self._clusters) > self.max_clusters or total > self.max_jobs:
                _, dropped = self._clusters.popitem(last=False)
                total -= len(dropped)
