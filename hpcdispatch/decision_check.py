"""Independent check of a dispatching decision against its snapshot.

It shares no code with the models that produce decisions: it reads the cluster's own facts (the
nodes, what the running jobs hold on each node, the queued jobs) and adds each started unit's
request. Those facts come from a full snapshot (`check_decision`) or from any other keeper of
the cluster state, e.g. a session, that answers `ClusterFacts` (`check_decision_against`); the
work is then proportional to the decision (the nodes and jobs it names), not to the cluster.
A decision that fails here must never be returned (service) or applied (simulator, Slurm bridge).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from typing import Protocol

from hpcdispatch.snapshot import Decision, Node, NodeState, QueuedJob, Snapshot


class ClusterFacts(Protocol):
    """The facts of one cluster state a decision is checked against."""

    def known_nodes(self, node_ids: Collection[str]) -> dict[str, Node]:
        """The nodes of these ids the cluster has (unknown ids are left out)."""

    def held(self, node_ids: Collection[str]) -> dict[str, Mapping[str, int]]:
        """What the running jobs hold in all, per resource type, on each of `node_ids`."""

    def queued_job(self, job_id: str) -> QueuedJob | None:
        """The queued job with this id (None: no such job is queued)."""


class SnapshotFacts:
    """ClusterFacts read from a full snapshot (its node and queue lists, its running units)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self._nodes: dict[str, Node] | None = None  # by id, made on first use
        self._queued: dict[str, QueuedJob] | None = None

    def known_nodes(self, node_ids: Collection[str]) -> dict[str, Node]:
        if self._nodes is None:
            self._nodes = {n.id: n for n in self.snapshot.nodes}
        known = self._nodes
        return {n: known[n] for n in node_ids if n in known}

    def held(self, node_ids: Collection[str]) -> dict[str, Mapping[str, int]]:
        used: dict[str, Counter[str]] = {n: Counter() for n in node_ids}
        for running in self.snapshot.running:
            for unit in running.units:
                if unit.node_id in used:
                    used[unit.node_id].update(unit.amounts)
        return dict(used)

    def queued_job(self, job_id: str) -> QueuedJob | None:
        if self._queued is None:
            self._queued = {j.id: j for j in self.snapshot.queued}
        return self._queued.get(job_id)


def check_decision(snapshot: Snapshot, decision: Decision) -> list[str]:
    """Return every violation of the decision; an empty list means the decision is valid."""
    return check_decision_against(SnapshotFacts(snapshot), decision)


def check_decision_against(facts: ClusterFacts, decision: Decision) -> list[str]:
    """Return every violation of the decision in the cluster state `facts` describes."""
    problems: list[str] = []
    nodes = facts.known_nodes(dict.fromkeys(n for start in decision.starts for n in start.nodes))
    # What the started units ask for, per node they touch (added to the running allocations).
    added: dict[str, dict[str, int]] = {}
    seen: set[str] = set()
    for start in decision.starts:
        job = facts.queued_job(start.job_id)
        if job is None:
            problems.append(f"job {start.job_id!r} is not a queued job of the snapshot")
            continue
        if start.job_id in seen:
            problems.append(f"job {start.job_id!r} is started twice")
            continue
        seen.add(start.job_id)
        if len(start.nodes) != job.units:
            problems.append(
                f"job {job.id!r} asks for {job.units} units but {len(start.nodes)} were placed"
            )
        request = job.unit_request
        for node_id in start.nodes:
            node = nodes.get(node_id)
            if node is None:
                problems.append(f"job {job.id!r} placed on unknown node {node_id!r}")
                continue
            if node.state is not NodeState.UP:
                problems.append(f"job {job.id!r} placed on {node.state.value} node {node_id!r}")
            usage = added.get(node_id)
            if usage is None:
                added[node_id] = dict(request)
            else:
                for resource, amount in request.items():
                    usage[resource] = usage.get(resource, 0) + amount

    # Usage of every node the decision touches: running allocations plus the started units.
    held = facts.held(list(nodes))
    for node_id, node in nodes.items():
        capacity = node.capacity
        running = held[node_id]
        extra = added.get(node_id, _NOTHING)
        for resource, amount in running.items():
            total = amount + extra.get(resource, 0) if extra else amount
            if total > capacity.get(resource, 0):
                _over(node_id, resource, total, capacity, problems)
        for resource, amount in extra.items():
            if resource not in running and amount > capacity.get(resource, 0):
                _over(node_id, resource, amount, capacity, problems)
    return problems


_NOTHING: Mapping[str, int] = {}


def _over(
    node_id: str, resource: str, amount: int, capacity: Mapping[str, int], problems: list[str]
) -> None:
    problems.append(
        f"node {node_id!r} over capacity on {resource!r}: {amount} > {capacity.get(resource, 0)}")
