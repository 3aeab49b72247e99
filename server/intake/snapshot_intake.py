"""A Dispatch request validated and converted in one pass, the running jobs from a cache.

`take_in` gives either the request's Snapshot or its violations, exactly those of
`validate_dispatch_request` (server/intake/validation.py), which stays the reference:

1. the size limits, the node table's own violations and the options, as there;
2. each running job's own checks and its conversion come from the RunningJobCache (checked
   once while its bytes stay the same); the checks that depend on the whole snapshot are done
   for the whole snapshot at once: unique job ids over running and queued jobs, no start after
   the snapshot's time, every unit on a known node, and the amounts held per node and resource
   type (numpy sums) within the node's capacity (a type the node lacks has capacity 0);
3. the queued jobs (a few thousand at most, unlike the running ones) are checked as there.

Anything found on this path makes `take_in` return the reference's own violations (the same
fields, descriptions and order): the fast path decides only *whether* the snapshot is valid,
never what to report. Should the reference find nothing where this path found something, the
reference wins and the snapshot is converted the reference's way.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from itertools import chain
from typing import cast

import numpy as np
import structlog

from hpcdispatch.proto_convert import queued_job_from_pb, snapshot_from_pb
from hpcdispatch.snapshot import Snapshot
from hpcdispatch.v1 import dispatcher_pb2 as pb

from ..config import ServerConfig
from .node_table import NodeCapacity, NodeTable
from .running_job_cache import CheckedRunningJob, RunningJobCache
from .validation import (
    Violation,
    _check_options,
    _check_queued,
    _check_sizes,
    _Collector,
    validate_dispatch_request,
)

log = structlog.get_logger("hpcdispatch.server")

# Amounts held, (unit, type) pairs, that the capacity sums take: each amount is <= 2^40
# (CheckedRunningJob), so fewer than 2^22 of them sum inside int64.
MAX_HELD = 2**22


@dataclass(frozen=True, slots=True)
class Intake:
    """A request's snapshot (no violations) or its violations (no snapshot)."""

    snapshot: Snapshot | None
    violations: list[Violation]


def take_in(
    request: pb.DispatchRequest,
    config: ServerConfig,
    known_predictors: list[int],
    table: NodeTable,
    cache: RunningJobCache,
) -> Intake:
    """Validate and convert `request`, whose node list `table` is (NodeTables.get(request))."""
    sizes = _Collector()
    _check_sizes(request, config, sizes)
    if sizes.items:
        return Intake(None, sizes.items)  # a snapshot beyond the limits is not inspected further
    running = fast_checked_running(request, config, known_predictors, table, cache)
    if running is None or table.nodes is None:
        return _reference(request, config, known_predictors, table)
    return Intake(Snapshot(
        time=request.time,
        nodes=table.nodes,
        running=tuple(e.job for e in running),
        queued=tuple(map(queued_job_from_pb, request.queued_jobs)),
    ), [])


def fast_checked_running(
    request: pb.DispatchRequest,
    config: ServerConfig,
    known_predictors: list[int],
    table: NodeTable,
    cache: RunningJobCache,
) -> list[CheckedRunningJob] | None:
    """The running jobs, checked and converted, when nothing is wrong with `request` (within
    the size limits); None as soon as anything is (the reference then says what)."""
    if table.check.violations or table.capacity is None:
        return None
    out = _Collector()
    _check_options(request, known_predictors, config.default_profile, out)
    queued_ids: Counter[str] = Counter()
    _check_queued(request, table.capacity.resource_index.keys(), queued_ids, config, out)
    if out.items:
        return None
    found = cache.lookup(request.cluster or "default", request.running_jobs)
    if None in found:
        return None
    checked = cast(list[CheckedRunningJob], found)
    if not _running_fit(checked, queued_ids.keys(), request.time, table.capacity):
        return None
    return checked


def held_cells(entry: CheckedRunningJob, capacity: NodeCapacity) -> tuple[int, ...] | None:
    """The flat capacity-matrix cell of each amount `entry` holds (row of its node, column of
    its type; the all-zero last column for a type no node has), or None when one of its units
    is on a node `capacity` does not have; memoized in the entry for the last table asked."""
    memo = entry.cells
    if memo is not None and memo[0] is capacity:
        return memo[1]
    position = capacity.position
    cells: tuple[int, ...] | None = None
    if all(node in position for node in entry.unit_nodes):
        width = capacity.matrix.shape[1]
        types, unknown_type = capacity.resource_index, width - 1
        cells = tuple(position[n] * width + types.get(r, unknown_type)
                      for n, r in zip(entry.held_nodes, entry.held_types, strict=True))
    entry.cells = (capacity, cells)
    return cells


def _running_fit(
    running: Sequence[CheckedRunningJob], queued_ids: AbstractSet[str], t: int,
    capacity: NodeCapacity,
) -> bool:
    """The whole-snapshot checks of running jobs that each passed their own checks."""
    if not running:
        return True
    ids = {e.job.id for e in running}
    if len(ids) != len(running) or not ids.isdisjoint(queued_ids):
        return False
    if max(e.job.start_time for e in running) > t:
        return False
    cells = [held_cells(e, capacity) for e in running]
    if None in cells:
        return False  # a unit on an unknown node
    held = sum(map(len, cells))  # type: ignore[arg-type]
    if held == 0:
        return True
    if held >= MAX_HELD:
        return False  # sums of amounts <= 2^40 might leave int64: the reference decides
    cell = np.fromiter(chain.from_iterable(cells), np.int64, count=held)  # type: ignore[arg-type]
    amounts = np.fromiter(chain.from_iterable(e.held_amounts for e in running), np.int64,
                          count=held)
    matrix = capacity.matrix
    total = np.zeros(matrix.size, dtype=np.int64)
    np.add.at(total, cell, amounts)
    return not bool((total > matrix.reshape(-1)).any())


def _reference(
    request: pb.DispatchRequest, config: ServerConfig, known_predictors: list[int],
    table: NodeTable,
) -> Intake:
    """The reference validation's verdict, and its conversion should it find nothing."""
    violations = validate_dispatch_request(request, config, known_predictors, table.check)
    if violations:
        return Intake(None, violations)
    log.warning("snapshot refused by the fast checks but valid; converted the reference way",
                running=len(request.running_jobs), queued=len(request.queued_jobs))
    return Intake(snapshot_from_pb(request, table.nodes), [])
