"""Checking a session delta (an UpdateSessionRequest) against the session's state, before any
of it is applied: the session's request checks, in the intake's room with the snapshot's (the
session room below the edge keeps the state, `sessions/state.py`, and speaks no wire).

Two kinds of problems, answered differently:
- the delta cannot apply to this state (a sequence gap, time going backwards, a job the state
  does not hold or already holds): a `SessionFailure`, answered FAILED_PRECONDITION so the
  caller re-sends a full snapshot;
- the delta is wrong in itself (a field a snapshot would have rejected, e.g. a job over a node's
  capacity): `Violation`s naming each field of the UpdateSessionRequest, answered
  INVALID_ARGUMENT.
Each job and node field is checked by the rules a full snapshot is checked by (the intake's
home of each part: `decision_options`, `nodes`, `jobs`, `fields`), against the state after
the delta (changes apply in the order node_changes, ended, cancelled, submitted, started), so a
session never holds what Dispatch would reject. The limits (list sizes, string lengths,
resource types, units: the same homes) come first: a delta beyond them is not inspected
further, and the session never holds more than a snapshot may.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from hpcdispatch.proto_convert import queued_job_from_pb, running_job_from_pb, windows_from_pb
from hpcdispatch.snapshot import Node, NodeState, QueuedJob, RunningJob, UnavailabilityWindow
from hpcdispatch.v1 import dispatcher_pb2 as pb

from ..config import ServerConfig
from .decision_options import (
    DecisionOptions,
    asked_predictor,
    check_option_limits,
    check_options,
)
from .fields import check_capacity_amounts
from .interruption import NEVER, Interruption
from .jobs import (
    check_job_count,
    check_listed_ids,
    check_queued_job,
    check_running_job,
    check_session_jobs,
    check_session_units,
    check_time,
)
from .nodes import (
    NODE_STATE_RULE,
    check_node_change_limits,
    check_node_count,
    check_session_nodes,
    check_session_types,
    check_windows,
)
from .shown import shown
from .violations import Violation, Violations

_NOTHING: Mapping[str, int] = {}

_STATES = {
    pb.NODE_STATE_UP: NodeState.UP,
    pb.NODE_STATE_DOWN: NodeState.DOWN,
    pb.NODE_STATE_DRAINED: NodeState.DRAINED,
}


class SessionView(Protocol):
    """What the checks read of a session's state (server/sessions/state.py's SessionState)."""

    @property
    def cluster(self) -> str: ...
    @property
    def time(self) -> int: ...
    @property
    def sequence(self) -> int: ...
    @property
    def nodes(self) -> Sequence[Node]: ...
    @property
    def position(self) -> Mapping[str, int]: ...  # node id -> its place in `nodes`
    @property
    def running(self) -> Mapping[str, RunningJob]: ...
    @property
    def queued(self) -> Mapping[str, QueuedJob]: ...
    @property
    def used(self) -> Mapping[str, Mapping[str, int]]: ...  # node id -> held by running jobs
    @property
    def resource_types(self) -> set[str]: ...
    @property
    def held_units(self) -> int: ...  # the units the running jobs hold, all together


@dataclass(frozen=True, slots=True)
class Failure:
    """Why the delta cannot apply to the session (FAILED_PRECONDITION)."""

    reason: int  # pb.SessionFailure
    message: str


NodeLabels = tuple[tuple[str, ...], tuple[str, ...]]  # (partitions, features)
NodeChange = tuple[str, NodeState, dict[str, int] | None, NodeLabels | None]


@dataclass(slots=True)
class CheckedDelta:
    """A delta in domain terms, ready to apply when `violations` and `failure` are empty."""

    violations: list[Violation] = field(default_factory=list)
    failure: Failure | None = None
    # (id, state, capacity or None: kept, (partitions, features) or None: kept)
    node_changes: list[NodeChange] = field(default_factory=list)
    submitted: tuple[QueuedJob, ...] = ()
    started: tuple[RunningJob, ...] = ()
    windows: tuple[UnavailabilityWindow, ...] | None = None  # None: the session keeps its own
    options: DecisionOptions | None = None  # the decision's options, when the delta is ok

    @property
    def ok(self) -> bool:
        return not self.violations and self.failure is None


def delta_digest(request: pb.UpdateSessionRequest) -> bytes:
    """A digest of the whole request, which a resend repeats field for field (map entries in
    any order: deterministic serialisation sorts them); see server/sessions/resend.py."""
    return hashlib.blake2b(request.SerializeToString(deterministic=True),
                           digest_size=16).digest()


def check_delta(
    state: SessionView, request: pb.UpdateSessionRequest, config: ServerConfig,
    predictors: list[int], interruption: Interruption = NEVER,
) -> CheckedDelta:
    out = CheckedDelta()
    limits = Violations()
    _check_limits(state, request, config, limits)
    if limits.items:
        out.violations = limits.items
        return out
    failure = _precondition(state, request)
    if failure is not None:
        out.failure = failure
        return out
    problems = Violations()
    check_time(request.time, "time", problems)
    settings = check_options(request, predictors, config.default_profile, problems)
    capacity = _check_node_changes(state, request, config, problems, out)
    _check_lists(request, problems)
    failure = _job_conflicts(state, request)
    if failure is not None:
        out.failure = failure
        return out
    _check_submitted(state, request, capacity, config, problems, interruption)
    _check_started(state, request, capacity, config, problems, interruption)
    if request.HasField("windows") and not problems.full:
        nodes = {n for n in state.position} | {c.id for c in request.node_changes}
        check_windows(request.windows.windows, "windows.windows", nodes, config, problems)
    out.violations = problems.items
    if out.ok:
        assert settings is not None  # a known profile, or it would be a violation
        out.submitted = tuple(map(queued_job_from_pb, request.submitted))
        out.started = tuple(map(running_job_from_pb, request.started))
        out.options = DecisionOptions.of(request, settings, state.cluster)
        if request.HasField("windows"):
            out.windows = windows_from_pb(request.windows.windows)
    return out


def _check_limits(
    state: SessionView, request: pb.UpdateSessionRequest, config: ServerConfig,
    out: Violations,
) -> None:
    """The delta's list sizes, the node changes' ids and resource types, the ids it names, and
    the units the session's running jobs would hold: cheap checks over the delta alone (and
    the units the session holds), before any of it is looked at further."""
    check_option_limits(request, config, out)
    check_node_count(request, config, out)
    check_job_count(request, config, out)
    if out.items:
        return
    check_node_change_limits(request, config, out)
    check_listed_ids(request, config, out)
    started = sum(len(j.units) for j in request.started)
    if started:  # held by the jobs still running: all held less what the ended ones hold
        running = state.running
        held = state.held_units - sum(len(running[job_id].units)
                                      for job_id in set(request.ended_job_ids)
                                      if job_id in running)
        check_session_units(held, started, config, out)


def _precondition(state: SessionView, request: pb.UpdateSessionRequest) -> Failure | None:
    if request.sequence == state.sequence and state.sequence > 0:
        return Failure(pb.SESSION_FAILURE_SEQUENCE_GAP,
                       f"sequence {request.sequence} was already applied with another delta "
                       "(a resend must repeat its request exactly)")
    if request.sequence != state.sequence + 1:
        return Failure(pb.SESSION_FAILURE_SEQUENCE_GAP,
                       f"sequence {request.sequence} does not follow the session's "
                       f"{state.sequence}")
    if request.time < state.time:
        return Failure(pb.SESSION_FAILURE_TIME_BACKWARDS,
                       f"time {request.time} is before the session's time {state.time}")
    return None


def _job_conflicts(state: SessionView, request: pb.UpdateSessionRequest) -> Failure | None:
    """Ids the state does not hold (ended, cancelled) or already holds (submitted, started)."""
    for job_id in request.ended_job_ids:
        if job_id not in state.running:
            return Failure(pb.SESSION_FAILURE_UNKNOWN_JOB,
                           f"ended job {shown(job_id)} is not running in the session")
    for job_id in request.cancelled_job_ids:
        if job_id not in state.queued:
            return Failure(pb.SESSION_FAILURE_UNKNOWN_JOB,
                           f"cancelled job {shown(job_id)} is not queued in the session")
    ended, cancelled = set(request.ended_job_ids), set(request.cancelled_job_ids)
    for job in request.submitted:
        if (job.id in state.queued and job.id not in cancelled) or (
                job.id in state.running and job.id not in ended):
            return Failure(pb.SESSION_FAILURE_JOB_CONFLICT,
                           f"submitted job {shown(job.id)} is already in the session")
    for started in request.started:
        if started.id in state.running and started.id not in ended:
            return Failure(pb.SESSION_FAILURE_JOB_CONFLICT,
                           f"started job {shown(started.id)} is already running in the "
                           "session")
    return None


def _check_lists(request: pb.UpdateSessionRequest, out: Violations) -> None:
    """Empty and repeated ids within one list of the delta."""
    lists = (
        ("ended_job_ids", list(request.ended_job_ids)),
        ("cancelled_job_ids", list(request.cancelled_job_ids)),
        ("submitted", [j.id for j in request.submitted]),
        ("started", [j.id for j in request.started]),
    )
    for name, ids in lists:
        seen: set[str] = set()
        suffix = "" if name.endswith("_ids") else ".id"
        for i, job_id in enumerate(ids):
            if not job_id:
                out.add(f"{name}[{i}]{suffix}", "must not be empty")
            elif job_id in seen:
                out.add(f"{name}[{i}]{suffix}", f"duplicate job id {shown(job_id)}")
            seen.add(job_id)


def _check_node_changes(
    state: SessionView, request: pb.UpdateSessionRequest, config: ServerConfig,
    out: Violations, result: CheckedDelta,
) -> dict[str, dict[str, int]]:
    """Capacities of the nodes the delta touches (changed or used), after the delta."""
    capacity: dict[str, dict[str, int]] = {}
    seen: set[str] = set()
    added = 0
    for i, change in enumerate(request.node_changes):
        path = f"node_changes[{i}]"
        cap = dict(change.capacity)
        if not change.id:
            out.add(f"{path}.id", "must not be empty")
            continue
        if change.id in seen:
            out.add(f"{path}.id", f"duplicate node id {shown(change.id)}")
            continue
        seen.add(change.id)
        known = change.id in state.position
        added += not known
        if change.state not in _STATES:
            out.add(f"{path}.state", NODE_STATE_RULE)
        if not cap and not known:
            out.add(f"{path}.capacity", "a new node must name at least one resource type")
        check_capacity_amounts(f"{path}.capacity", cap, out)
        if cap:
            capacity[change.id] = cap
        if change.state in _STATES:
            labels = ((tuple(change.labels.partitions), tuple(change.labels.features))
                      if change.HasField("labels") else None)
            result.node_changes.append((change.id, _STATES[change.state], cap or None, labels))
    check_session_nodes(len(state.nodes) + added, config, out)
    released: dict[str, Counter[str]] | None = None  # made for the first changed capacity
    for i, change in enumerate(request.node_changes):
        new_cap = capacity.get(change.id)
        if new_cap is None or change.id not in state.position:
            continue
        if released is None:
            released = _ended_usage(state, request.ended_job_ids)
        held = _held_after_ended(state, change.id, released)
        for resource, amount in held.items():
            if amount > new_cap.get(resource, 0):
                out.add(f"node_changes[{i}].capacity",
                        f"running jobs hold {amount} {shown(resource)} on node "
                        f"{shown(change.id)}, more than the new capacity "
                        f"{new_cap.get(resource, 0)}")
    return capacity


def _ended_usage(state: SessionView, ended: Sequence[str]) -> dict[str, Counter[str]]:
    """What the ended jobs release, per node."""
    released: dict[str, Counter[str]] = {}
    for job_id in ended:
        job = state.running.get(job_id)
        for unit in job.units if job is not None else ():
            released.setdefault(unit.node_id, Counter()).update(unit.amounts)
    return released


def _held_after_ended(
    state: SessionView, node_id: str, released: dict[str, Counter[str]]
) -> Counter[str]:
    """What running jobs hold on the node once the ended ones are gone (a new Counter)."""
    held: Counter[str] = Counter(state.used.get(node_id, _NOTHING))
    gone = released.get(node_id)
    if gone:
        held.subtract(gone)
    return held


def _node_capacity(
    state: SessionView, node_id: str, changed: dict[str, dict[str, int]]
) -> Mapping[str, int] | None:
    """The node's capacity after the delta (read only); None for an unknown node."""
    if node_id in changed:
        return changed[node_id]
    at = state.position.get(node_id)
    return None if at is None else state.nodes[at].capacity


def _check_submitted(
    state: SessionView, request: pb.UpdateSessionRequest,
    changed: dict[str, dict[str, int]], config: ServerConfig, out: Violations,
    interruption: Interruption,
) -> None:
    types = state.resource_types if not changed else (
        {r for n in state.nodes if n.id not in changed for r in n.capacity}
        | {r for cap in changed.values() for r in cap}
    )
    if not check_session_types(len(types), config, out):
        return
    submitted_ids = {j.id for j in request.submitted}
    jobs = (len(state.running) + len(state.queued) + len(request.submitted)
            + sum(1 for j in request.started
                  if j.id not in state.queued and j.id not in submitted_ids)
            - len(request.ended_job_ids) - len(request.cancelled_job_ids))
    check_session_jobs(jobs, config, out)
    oracle = asked_predictor(request).kind == pb.PREDICTOR_ORACLE
    for i, job in enumerate(request.submitted):
        check_queued_job(job, f"submitted[{i}]", request.time, types, config.max_units, oracle,
                         out, config)
        interruption.tick()
        if out.full:
            return
    if asked_predictor(request).kind == pb.PREDICTOR_ORACLE and request.decide:
        started = {j.id for j in request.started}
        cancelled = set(request.cancelled_job_ids)
        for waiting in state.queued.values():
            if waiting.actual_duration is None and waiting.id not in started | cancelled:
                out.add("predictor", f"the ORACLE predictor needs every queued job's actual "
                        f"duration; queued job {shown(waiting.id)} has none")
                return


def _check_started(
    state: SessionView, request: pb.UpdateSessionRequest,
    changed: dict[str, dict[str, int]], config: ServerConfig, out: Violations,
    interruption: Interruption,
) -> None:
    released: dict[str, Counter[str]] | None = None  # made for the first node a start holds
    held: dict[str, Counter[str]] = {}  # node -> held after ended and the starts so far
    reported: set[tuple[str, str]] = set()

    def capacity_of(node_id: str) -> Mapping[str, int] | None:
        return _node_capacity(state, node_id, changed)

    def held_on(node_id: str) -> Counter[str]:
        nonlocal released
        if node_id not in held:
            if released is None:
                released = _ended_usage(state, request.ended_job_ids)
            held[node_id] = _held_after_ended(state, node_id, released)
        return held[node_id]

    for i, job in enumerate(request.started):
        check_running_job(job, f"started[{i}]", request.time, capacity_of, held_on, reported,
                          out, config)
        interruption.tick(1 + len(job.units))
        if out.full:
            return
