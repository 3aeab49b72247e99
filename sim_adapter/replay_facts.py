"""The simulator's own facts of the cluster, for its check of every decision it applies.

The simulator checks each decision with `hpcdispatch.decision_check` against what it knows
itself, whatever the service said: its nodes, what the jobs it started hold on each node, and
its queue. Those facts are kept up to date as jobs start and end, so a check costs the nodes and
jobs the decision names, not a pass over every running job (`decision_check.ClusterFacts`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence

from hpcdispatch.decision_check import NodeRows, node_rows_of
from hpcdispatch.snapshot import Node, QueuedJob, UnavailabilityWindow, UnitAllocation

_NOTHING: Mapping[str, int] = {}


class ReplayFacts:
    """decision_check.ClusterFacts of a replay: the system's nodes, what the running jobs hold
    per node (changed by `hold` and `release`), the queue (read through `queued_job`), the
    windows the decision was sent (read through `windows`)."""

    def __init__(self, nodes: Sequence[Node], queued_job: Callable[[str], QueuedJob | None],
                 windows: Callable[[], Sequence[UnavailabilityWindow]] = tuple) -> None:
        self.time = 0  # t of the decision to check (the simulator sets it)
        self._windows = windows
        self._nodes = {n.id: n for n in nodes}
        self._held: dict[str, Counter[str]] = {}
        self._queued_job = queued_job

    def hold(self, units: Iterable[UnitAllocation]) -> None:
        """A started job's units now hold their amounts."""
        for unit in units:
            self._held.setdefault(unit.node_id, Counter()).update(unit.amounts)

    def release(self, units: Iterable[UnitAllocation]) -> None:
        """A finished job's units hold nothing any more."""
        for unit in units:
            held = self._held[unit.node_id]
            held.subtract(unit.amounts)
            if not any(held.values()):
                del self._held[unit.node_id]

    def known_nodes(self, node_ids: Collection[str]) -> dict[str, Node]:
        nodes = self._nodes
        return {n: nodes[n] for n in node_ids if n in nodes}

    def node_rows(self, node_ids: Sequence[str]) -> NodeRows:
        held = self._held
        return node_rows_of(node_ids, self.known_nodes(node_ids),
                            {n: held.get(n, _NOTHING) for n in node_ids})

    def queued_job(self, job_id: str) -> QueuedJob | None:
        return self._queued_job(job_id)

    def windows(self) -> Sequence[UnavailabilityWindow]:
        return self._windows()  # those the decision at `time` was sent
