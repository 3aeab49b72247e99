"""A full snapshot (a Dispatch's, an OpenSession's) checked and converted in one pass, the
running jobs from a cache.

`take_in` is the one intake call of a snapshot: the size limits, then the options (resolved to
the decision's search settings once), then everything else; the other limits (string lengths,
resource types, units: each with its rule, server/intake/nodes.py and jobs.py) are checked
before anything is converted, and every loop over the snapshot's items stops between chunks
once the decision's deadline has passed or its caller has gone (`Interruption`:
DecisionAbandoned at the "convert" stage). It gives either the request's Snapshot, node index
and decision options, or its violations, exactly those of `validate_dispatch_request`
(server/intake/validation.py), which stays the reference:

1. the size limits, the options and the node table's own violations (its limits first), as
   there;
2. each running job's own checks and its conversion come from the RunningJobCache (checked
   once while its bytes stay the same); the checks that depend on the whole snapshot are done
   for the whole snapshot at once: unique job ids over running and queued jobs, no start after
   the snapshot's time, every unit on a known node, and the amounts held per node and resource
   type (numpy sums) within the node's capacity (a type the node lacks has capacity 0);
3. the queued jobs (a few thousand at most, unlike the running ones) are checked as there.

Anything found on this path makes `take_in` report the reference's own violations (the same
fields, descriptions and order): the fast path decides only *whether* the snapshot is valid,
never what to report. Should the reference find nothing where this path found something, the
reference wins and the snapshot is converted the reference's way. Without a cache (an
OpenSession's snapshot, kept by its session instead) the reference's way is the only one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from itertools import chain
from typing import TypeVar, cast

import numpy as np

from hpcdispatch.proto_convert import (
    nodes_from_pb,
    queued_job_from_pb,
    running_job_from_pb,
    windows_from_pb,
)
from hpcdispatch.snapshot import QueuedJob, RunningJob, Snapshot
from hpcdispatch.v1 import dispatcher_pb2 as pb

from ..config import ServerConfig
from ..domain.lazy_logger import LazyLogger
from ..domain.node_index import NodeIndex
from .decision_options import DecisionOptions
from .interruption import NEVER, Interruption
from .jobs import check_queued
from .node_table import NodeCapacity, NodeTable, NodeTables
from .nodes import check_windows
from .running_job_cache import CheckedRunningJob, RunningJobCache
from .validation import (
    Violation,
    Violations,
    check_contents,
    check_options,
    check_sizes,
    check_snapshot_limits,
)

CHUNK_JOBS = 2048  # jobs converted between two looks at the deadline and the caller

log = LazyLogger("hpcdispatch.server")

# Amounts held, (unit, type) pairs, that the capacity sums take: each amount is <= 2^40
# (CheckedRunningJob), so fewer than 2^22 of them sum inside int64.
MAX_HELD = 2**22


@dataclass(frozen=True, slots=True)
class Intake:
    """A snapshot taken in: its violations, or (none) what its decision needs."""

    violations: list[Violation]
    snapshot: Snapshot | None = None
    nodes: NodeIndex | None = None  # the snapshot's nodes as the Problem indexes them
    options: DecisionOptions | None = None


def take_in(
    request: pb.DispatchRequest,
    config: ServerConfig,
    known_predictors: list[int],
    tables: NodeTables,
    cache: RunningJobCache | None,
    interruption: Interruption = NEVER,
) -> Intake:
    """Check and convert `request` once; its node list from `tables`, its running jobs from
    `cache` when given (each cluster's last running jobs, checked). Raises DecisionAbandoned
    when `interruption` says the deadline has passed or the caller has gone."""
    out = Violations()
    check_sizes(request, config, out)
    if out.items:
        return Intake(out.items)  # a snapshot beyond the limits is not inspected further
    table = tables.get(request, interruption)
    settings = check_options(request, known_predictors, config.default_profile, out)
    snapshot = None
    if cache is not None and not out.items:
        running = fast_checked_running(request, config, table, cache, interruption)
        if running is not None and table.nodes is not None and _windows_valid(request, config,
                                                                              table):
            snapshot = Snapshot(
                time=request.time,
                nodes=table.nodes,
                running=tuple(e.job for e in running),
                queued=_converted(request.queued_jobs, queued_job_from_pb, interruption),
                windows=windows_from_pb(request.windows),
            )
    if snapshot is None:  # the reference's verdict, and its conversion should it find nothing
        limits = Violations()  # the reference's order: the limits before the options
        check_snapshot_limits(request, config, limits, interruption)
        if limits.items:
            return Intake(limits.items)
        check_contents(request, config, table.check, out, interruption)
        if out.items:
            return Intake(out.items)
        if cache is not None:
            log.warning("snapshot refused by the fast checks but valid; converted the "
                        "reference way", running=len(request.running_jobs),
                        queued=len(request.queued_jobs))
        snapshot = Snapshot(
            time=request.time,
            nodes=table.nodes if table.nodes is not None else nodes_from_pb(request),
            running=_converted(request.running_jobs, running_job_from_pb, interruption),
            queued=_converted(request.queued_jobs, queued_job_from_pb, interruption),
            windows=windows_from_pb(request.windows),
        )
    assert settings is not None and table.index is not None  # no violations: both known
    return Intake([], snapshot, table.index,
                  DecisionOptions.of(request, settings, request.cluster))


def _windows_valid(request: pb.DispatchRequest, config: ServerConfig, table: NodeTable) -> bool:
    """Whether the snapshot's windows are valid on its (valid) nodes: the fast path's check
    (the reference says what is wrong otherwise)."""
    if not request.windows:
        return True
    assert table.capacity is not None
    out = Violations()
    check_windows(request.windows, "windows", table.capacity.position.keys(), config, out)
    return not out.items


_Message = TypeVar("_Message", pb.RunningJob, pb.QueuedJob)
_Job = TypeVar("_Job", RunningJob, QueuedJob)


def _converted(
    messages: Sequence[_Message], convert: Callable[[_Message], _Job],
    interruption: Interruption,
) -> tuple[_Job, ...]:
    """`messages` converted chunk by chunk, interruptible between chunks."""
    out: list[_Job] = []
    for start in range(0, len(messages), CHUNK_JOBS):
        interruption.check()
        out.extend(map(convert, messages[start:start + CHUNK_JOBS]))
    return tuple(out)


def fast_checked_running(
    request: pb.DispatchRequest,
    config: ServerConfig,
    table: NodeTable,
    cache: RunningJobCache,
    interruption: Interruption = NEVER,
) -> list[CheckedRunningJob] | None:
    """The running jobs, checked and converted, when nothing is wrong with `request` beyond its
    sizes and options (checked before); None as soon as anything is (the reference then says
    what)."""
    if table.check.violations or table.capacity is None:
        return None
    out = Violations()
    queued_ids: Counter[str] = Counter()
    check_queued(request, table.capacity.resource_index.keys(), queued_ids, config, out,
                 interruption)
    if out.items:
        return None
    found = cache.lookup(request.cluster or "default", request.running_jobs, config,
                         interruption)
    if None in found:
        return None
    checked = cast(list[CheckedRunningJob], found)
    if sum(len(e.unit_nodes) for e in checked) > config.max_total_units:
        return None
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


class SnapshotIntake:
    """The server's intake of full snapshots, Dispatch's and OpenSession's: the node tables they
    share, and the running-job cache of Dispatch (a session keeps its running jobs itself)."""

    def __init__(self, config: ServerConfig, known_predictors: Callable[[], list[int]]) -> None:
        self.config = config
        self.known_predictors = known_predictors  # the predictor kinds the server has now
        self.node_tables = NodeTables(config=config)
        self.running_jobs = RunningJobCache()  # each cluster's last running jobs, checked

    def dispatch(
        self, request: pb.DispatchRequest, interruption: Interruption = NEVER
    ) -> Intake:
        return take_in(request, self.config, self.known_predictors(), self.node_tables,
                       self.running_jobs, interruption)

    def session(
        self, request: pb.DispatchRequest, interruption: Interruption = NEVER
    ) -> Intake:
        """An OpenSession's snapshot: checked and converted the reference way."""
        return take_in(request, self.config, self.known_predictors(), self.node_tables, None,
                       interruption)
