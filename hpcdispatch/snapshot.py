"""Domain types of a dispatching instance: the cluster snapshot and the decision.

These are the model-independent facts every part of hpcdispatch agrees on (service,
simulator, Slurm bridge). Times are integer seconds; resources are named amounts.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

Resources = Mapping[str, int]


class NodeState(enum.Enum):
    UP = "up"
    DOWN = "down"
    DRAINED = "drained"


@dataclass(frozen=True, slots=True)
class Node:
    id: str
    state: NodeState
    capacity: Resources  # cap[n][r]
    partitions: tuple[str, ...] = ()  # the partitions it is in (none: only unrestricted jobs)
    features: tuple[str, ...] = ()  # its node features


@dataclass(frozen=True, slots=True)
class UnitAllocation:
    node_id: str
    amounts: Resources


@dataclass(frozen=True, slots=True)
class RunningJob:
    id: str
    user: str
    name: str
    start_time: int  # s_i
    requested_time: int
    expected_duration: int | None  # d_i when the caller knows it
    units: tuple[UnitAllocation, ...]


@dataclass(frozen=True, slots=True)
class QueuedJob:
    id: str
    user: str
    name: str
    queue: str
    submit_time: int  # q_i
    units: int  # rn_i
    unit_request: Resources  # req[i][r] / rn_i
    requested_time: int
    actual_duration: int | None = None  # simulation only (oracle)
    promised_start: int | None = None  # a promise an earlier answer gave (the promise book)
    promise_token: str = ""  # the token that promise came with (ExpectedStart.promise_token)
    # Set by the server's edge only: a real promise (absolute start) whose token was made for
    # another shape (units, request, requested time); the job is promised anew, the move said.
    reshaped_promise: int | None = None
    # A site's own rules (docs/service.md, "A site's own rules"): the workload manager's
    # priority (higher first; 0 everywhere: submit order alone), the partitions it may run in
    # (empty: any node), the node features it requires (all of them), its account, an OR of
    # AND-terms of features (one term at least, when any: Slurm's "a&b|c"), the reservation it
    # must run in (the windows of that name; "": none).
    priority: int = 0
    partitions: tuple[str, ...] = ()
    required_features: tuple[str, ...] = ()
    account: str = ""
    feature_alternatives: tuple[tuple[str, ...], ...] = ()
    reservation: str = ""

    def may_use(self, node: Node) -> bool:
        """Whether the job's partitions and features allow `node` (not its reservation: the
        windows say where and when that is, `UnavailabilityWindow.holds_inside`)."""
        if self.partitions and not any(p in node.partitions for p in self.partitions):
            return False
        if self.feature_alternatives and not any(
                all(f in node.features for f in term) for term in self.feature_alternatives):
            return False
        return all(f in node.features for f in self.required_features)

    @property
    def has_node_rules(self) -> bool:
        """Whether its partitions or features restrict the nodes it may use."""
        return bool(self.partitions or self.required_features or self.feature_alternatives)


@dataclass(frozen=True, slots=True)
class UnavailabilityWindow:
    """Nodes unavailable over [start, end) (absolute seconds, the snapshot's clock) to every
    job but those of `users` or `accounts` (both empty: a maintenance, nobody)."""

    nodes: tuple[str, ...]  # node ids
    start: int
    end: int
    users: tuple[str, ...] = ()
    accounts: tuple[str, ...] = ()
    name: str = ""  # the reservation's name: the jobs asking for it are admitted ("": none)

    def admits(self, job: QueuedJob) -> bool:
        return (job.user in self.users or (bool(job.account) and job.account in self.accounts)
                or (bool(job.reservation) and job.reservation == self.name))

    def holds_inside(self, job: QueuedJob, t: int) -> bool:
        """Whether this window is one of `job`'s reservation and holds its requested time
        from t: [t, t + requested) within [start, end)."""
        return (bool(job.reservation) and job.reservation == self.name and self.start <= t
                and t + job.requested_time <= self.end)

    def blocks(self, job: QueuedJob, t: int) -> bool:
        """Whether `job`, started at t and run to its requested time, would run inside the
        window without being admitted to it: [t, t + requested) overlaps [start, end)."""
        return self.start < t + job.requested_time and t < self.end and not self.admits(job)


@dataclass(frozen=True, slots=True)
class Snapshot:
    time: int  # t
    nodes: tuple[Node, ...]
    running: tuple[RunningJob, ...]
    queued: tuple[QueuedJob, ...]
    windows: tuple[UnavailabilityWindow, ...] = ()  # the nodes' unavailability windows


@dataclass(frozen=True, slots=True)
class JobStart:
    """A queued job started at t: the node of each of its units."""

    job_id: str
    nodes: tuple[str, ...]  # one node id per unit
    expected_duration: int = 0  # d_i the decision used, seconds (a valid decision's: >= 1)
    # What each unit holds, as an answer on the wire says (`UnitPlacement.amounts`); None for a
    # decision made in this process, whose units hold their job's request by construction.
    unit_amounts: tuple[Resources, ...] | None = field(default=None, compare=False)


@dataclass(slots=True)
class Decision:
    time: int
    starts: list[JobStart] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class JobCompletion:
    """A job that finished, as the predictors' knowledge base learns it (times in seconds)."""

    job_id: str
    user: str
    name: str
    queue: str
    units: int  # rn_i
    unit_request: Resources
    requested_time: int
    start_time: int
    end_time: int
