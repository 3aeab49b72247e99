"""Independent check of a dispatching decision against its snapshot.

It shares no code with the models that produce decisions: it reads the cluster's own facts (t,
the nodes, what the running jobs hold on each node, the queued jobs), checks each start against
its job (queued, started once, its units, what each unit holds, its d_i) and adds each started
unit's request to its node (`RULES` lists what it checks). Those facts come from a full
snapshot (`check_decision`) or from any other keeper of the cluster state, e.g. a session, that
answers `ClusterFacts` (`check_decision_against`); the work is then proportional to the
decision (the nodes and jobs it names), not to the cluster.
A decision that fails here must never be returned (service) or applied (simulator, Slurm bridge).

The usage sum is one array operation: the facts give the nodes the decision touches as rows
(`NodeRows`: capacity, what running jobs hold, up or not), the started units' requests are
added to their node's row, and every (node, resource type) over capacity is reported.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from hpcdispatch.snapshot import (
    Decision,
    JobStart,
    Node,
    NodeState,
    QueuedJob,
    Snapshot,
    UnavailabilityWindow,
)


@dataclass(frozen=True, slots=True)
class NodeRows:
    """The facts of some nodes, row i for the i-th node asked for (unknown nodes: not `known`,
    not `up`, zero capacity and usage)."""

    resources: tuple[str, ...]  # the columns of `capacity` and `held`
    known: npt.NDArray[np.bool_]
    up: npt.NDArray[np.bool_]  # known and in state UP
    capacity: npt.NDArray[np.int64]  # nodes × resources
    held: npt.NDArray[np.int64]  # what the running jobs hold in all, nodes × resources


class ClusterFacts(Protocol):
    """The facts of one cluster state a decision is checked against."""

    @property
    def time(self) -> int:
        """t of the state: the time a decision on it echoes."""

    def known_nodes(self, node_ids: Collection[str]) -> dict[str, Node]:
        """The nodes of these ids the cluster has (unknown ids are left out)."""

    def node_rows(self, node_ids: Sequence[str]) -> NodeRows:
        """The facts of these (distinct) node ids as rows, in their order."""

    def queued_job(self, job_id: str) -> QueuedJob | None:
        """The queued job with this id (None: no such job is queued)."""

    def windows(self) -> Sequence[UnavailabilityWindow]:
        """The nodes' unavailability windows (maintenance, reservations)."""


def node_rows_of(
    node_ids: Sequence[str], nodes: Mapping[str, Node], held: Mapping[str, Mapping[str, int]]
) -> NodeRows:
    """NodeRows from per-node mappings: `nodes` (the known ones of `node_ids`) and what the
    running jobs hold on each."""
    resources = tuple(sorted(
        {r for n in nodes.values() for r in n.capacity} | {r for h in held.values() for r in h}))
    column = {r: j for j, r in enumerate(resources)}
    shape = (len(node_ids), len(resources))
    capacity = np.zeros(shape, dtype=np.int64)
    used = np.zeros(shape, dtype=np.int64)
    known = np.zeros(len(node_ids), dtype=bool)
    up = np.zeros(len(node_ids), dtype=bool)
    for i, node_id in enumerate(node_ids):
        node = nodes.get(node_id)
        if node is not None:
            known[i] = True
            up[i] = node.state is NodeState.UP
            for resource, amount in node.capacity.items():
                capacity[i, column[resource]] = amount
        for resource, amount in held.get(node_id, _NOTHING).items():
            used[i, column[resource]] = amount
    return NodeRows(resources, known, up, capacity, used)


class SnapshotFacts:
    """ClusterFacts read from a full snapshot (its node and queue lists, its running units)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.time = snapshot.time
        self._nodes: dict[str, Node] | None = None  # by id, made on first use
        self._queued: dict[str, QueuedJob] | None = None

    def known_nodes(self, node_ids: Collection[str]) -> dict[str, Node]:
        if self._nodes is None:
            self._nodes = {n.id: n for n in self.snapshot.nodes}
        known = self._nodes
        return {n: known[n] for n in node_ids if n in known}

    def held(self, node_ids: Collection[str]) -> dict[str, Mapping[str, int]]:
        """What the running jobs hold in all, per resource type, on each of `node_ids`."""
        used: dict[str, Counter[str]] = {n: Counter() for n in node_ids}
        for running in self.snapshot.running:
            for unit in running.units:
                if unit.node_id in used:
                    used[unit.node_id].update(unit.amounts)
        return dict(used)

    def node_rows(self, node_ids: Sequence[str]) -> NodeRows:
        return node_rows_of(node_ids, self.known_nodes(node_ids), self.held(node_ids))

    def queued_job(self, job_id: str) -> QueuedJob | None:
        if self._queued is None:
            self._queued = {j.id: j for j in self.snapshot.queued}
        return self._queued.get(job_id)

    def windows(self) -> Sequence[UnavailabilityWindow]:
        return self.snapshot.windows


# The check's rules, by name: the echoed time; each start of a job that is queued, started
# once, with its number of units, each unit holding exactly the job's per-unit request, with a
# d_i of at least a second and at most the requested time; each unit on a known node that is
# up, in one of the job's partitions, with all its required features and all of one term of
# its feature_alternatives (`eligible`), and outside every unavailability window that does not
# admit the job over [t, t + requested time) and, for a job of reservation R, inside a window
# named R over that run (`window`); no node over its capacity.
# `check_decision_against(..., rules=)` applies some of them (the suite's mutation self-test
# drops each in turn: every rule must catch a mutation alone).
RULES = ("time", "queued", "once", "units", "amounts", "duration", "known_node", "up_node",
         "capacity", "eligible", "window")


def check_decision(snapshot: Snapshot, decision: Decision) -> list[str]:
    """Return every violation of the decision; an empty list means the decision is valid."""
    return check_decision_against(SnapshotFacts(snapshot), decision)


def check_decision_against(facts: ClusterFacts, decision: Decision,
                           rules: Collection[str] = RULES) -> list[str]:
    """Return every violation of the decision in the cluster state `facts` describes: first a
    time other than the state's, then those of each start (in decision order), then the nodes
    over capacity (in the order the decision first names them, each resource type by name)."""
    unknown_rules = set(rules).difference(RULES)
    assert not unknown_rules, f"no such rules: {sorted(unknown_rules)}"
    timing = ([f"decision time {decision.time} is not the state's time t={facts.time}"]
              if "time" in rules and decision.time != facts.time else [])
    if not decision.starts:
        return timing
    # Each start's own problems, with the start's position (its node problems follow them).
    problems: list[tuple[int, str]] = []
    touched: list[str] = []  # the node of every unit of every start
    placed: list[tuple[int, JobStart]] = []  # starts of queued jobs, each job once
    requests: list[Mapping[str, int]] = []  # the unit request of each placed start
    units: list[int] = []  # of each placed start
    seen: set[str] = set()
    for at, start in enumerate(decision.starts):
        touched.extend(start.nodes)
        job = facts.queued_job(start.job_id)
        if job is None:
            if "queued" in rules:
                problems.append((at, f"job {start.job_id!r} is not a queued job of the snapshot"))
            continue
        if start.job_id in seen and "once" in rules:
            problems.append((at, f"job {start.job_id!r} is started twice"))
            continue
        seen.add(start.job_id)
        problems.extend((at, text) for text in _start_problems(start, job, rules))
        placed.append((at, start))
        requests.append(job.unit_request)
        units.append(len(start.nodes))

    node_ids = list(dict.fromkeys(touched))
    rows = facts.node_rows(node_ids)
    row_of = dict(zip(node_ids, range(len(node_ids)), strict=True))
    unit_nodes = [n for _, start in placed for n in start.nodes]
    unit_rows = np.fromiter(map(row_of.__getitem__, unit_nodes), dtype=np.int64,
                            count=len(unit_nodes))
    if not rows.up[unit_rows].all():
        _node_problems(facts, rows, placed, row_of, problems, rules)
    if "eligible" in rules:
        _eligibility_problems(facts, placed, problems)
    if "window" in rules:
        _window_problems(facts, placed, problems)
    ordered = timing + [text for _, text in sorted(problems, key=lambda p: p[0])]
    if "capacity" in rules:
        ordered.extend(_over_capacity(rows, node_ids, unit_rows, requests, units))
    return ordered


def _start_problems(start: JobStart, job: QueuedJob, rules: Collection[str]) -> list[str]:
    """What is wrong with one start of queued job `job` by itself: its number of units, what
    each unit holds, its d_i."""
    problems = []
    if "units" in rules and len(start.nodes) != job.units:
        problems.append(f"job {job.id!r} asks for {job.units} units but "
                        f"{len(start.nodes)} were placed")
    if "amounts" in rules and start.unit_amounts is not None:
        request = _nonzero(job.unit_request)
        if len(start.unit_amounts) != len(start.nodes):
            problems.append(f"job {job.id!r} has {len(start.nodes)} units placed but "
                            f"{len(start.unit_amounts)} units' amounts")
        for unit, amounts in enumerate(start.unit_amounts):
            if _nonzero(amounts) != request:
                problems.append(f"job {job.id!r} unit {unit} holds {dict(amounts)} where its "
                                f"per-unit request is {dict(job.unit_request)}")
                break  # one unit named is enough
    if "duration" in rules and not (
            1 <= start.expected_duration <= max(job.requested_time, 1)):
        problems.append(f"job {job.id!r} expected_duration {start.expected_duration} s is not "
                        f"within 1 .. its requested time {job.requested_time} s")
    return problems


def _nonzero(amounts: Mapping[str, int]) -> dict[str, int]:
    """`amounts` without its zero entries (a type held at 0 is a type not held)."""
    return {r: a for r, a in amounts.items() if a}


def _over_capacity(
    rows: NodeRows, node_ids: Sequence[str], unit_rows: npt.NDArray[np.int64],
    requests: Sequence[Mapping[str, int]], units: Sequence[int],
) -> list[str]:
    """Every (node, resource type) the decision takes over capacity: what the running work
    holds plus the started units' requests (one array sum), node by node, types by name."""
    extra = set().union(*requests).difference(rows.resources)
    resources = rows.resources + tuple(sorted(extra))
    capacity, held = rows.capacity, rows.held
    if extra:  # requested types none of these nodes has: capacity and usage 0
        capacity = np.pad(capacity, ((0, 0), (0, len(extra))))
        held = np.pad(held, ((0, 0), (0, len(extra))))
    asked = np.empty((len(requests), len(resources)), dtype=np.int64)
    for j, resource in enumerate(resources):
        asked[:, j] = np.fromiter((r.get(resource, 0) for r in requests), dtype=np.int64,
                                  count=len(requests))
    total = held.copy()
    np.add.at(total, unit_rows, np.repeat(asked, units, axis=0))
    over = (total > capacity) & rows.known[:, None]
    return [f"node {node_ids[i]!r} over capacity on {resources[j]!r}: "
            f"{int(total[i, j])} > {int(capacity[i, j])}"
            for i, j in sorted(zip(*np.nonzero(over), strict=True),
                               key=lambda cell: (cell[0], resources[cell[1]]))]


def _node_problems(
    facts: ClusterFacts, rows: NodeRows, placed: list[tuple[int, JobStart]],
    row_of: Mapping[str, int], problems: list[tuple[int, str]], rules: Collection[str],
) -> None:
    """Units of placed starts on unknown nodes or nodes not up."""
    for at, start in placed:
        for node_id in start.nodes:
            row = row_of[node_id]
            if not rows.known[row]:
                if "known_node" in rules:
                    problems.append(
                        (at, f"job {start.job_id!r} placed on unknown node {node_id!r}"))
            elif not rows.up[row] and "up_node" in rules:
                state = facts.known_nodes([node_id])[node_id].state
                problems.append(
                    (at, f"job {start.job_id!r} placed on {state.value} node {node_id!r}"))


def _eligibility_problems(facts: ClusterFacts, placed: list[tuple[int, JobStart]],
                          problems: list[tuple[int, str]]) -> None:
    """Units of placed starts on known nodes outside the job's partitions or lacking one of
    its required features (one node named per start)."""
    for at, start in placed:
        job = facts.queued_job(start.job_id)
        if job is None or not job.has_node_rules:
            continue
        for node_id, node in facts.known_nodes(set(start.nodes)).items():
            if not job.may_use(node):
                alternatives = (f" or every feature of one of {[list(t) for t in terms]}"
                                if (terms := job.feature_alternatives) else "")
                problems.append((at, f"job {job.id!r} placed on node {node_id!r}, outside its "
                                 f"partitions {list(job.partitions)} or lacking one of its "
                                 f"required features {list(job.required_features)}"
                                 f"{alternatives}"))
                break


def _window_problems(facts: ClusterFacts, placed: list[tuple[int, JobStart]],
                     problems: list[tuple[int, str]]) -> None:
    """Placed starts whose requested time [t, t + requested) runs into an unavailability window
    on one of their nodes that does not admit the job (one window named per start)."""
    t = facts.time
    windows = [(w, frozenset(w.nodes)) for w in facts.windows() if w.end > t]
    for at, start in placed:
        job = facts.queued_job(start.job_id)
        if job is None or not (windows or job.reservation):
            continue
        nodes = set(start.nodes)
        if job.reservation:
            outside = nodes.difference(*(covered for w, covered in windows
                                         if w.holds_inside(job, t)))
            if outside:
                problems.append((at, f"job {job.id!r} on node {min(outside)!r} would run over "
                                 f"[{t}, {t + job.requested_time}) outside its reservation "
                                 f"{job.reservation!r}: no window of that name holds that run "
                                 f"on that node"))
                continue
        for window, covered in windows:
            if window.blocks(job, t) and not covered.isdisjoint(nodes):
                node_id = min(covered & nodes)
                problems.append((at, f"job {job.id!r} on node {node_id!r} would run over "
                                 f"[{t}, {t + job.requested_time}) into the unavailability "
                                 f"window [{window.start}, {window.end}) that does not admit "
                                 f"it (user {job.user!r}, account {job.account!r})"))
                break


_NOTHING: Mapping[str, int] = {}
