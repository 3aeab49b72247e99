"""Snapshot validation: every problem found, each named by its field path.

The service turns the violations into INVALID_ARGUMENT with a google.rpc.BadRequest. Field paths
use the proto field names, e.g. `queued_jobs[3].unit_request["gpu"]`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from hpcdispatch.catalog import predictor_name
from hpcdispatch.v1 import dispatcher_pb2 as pb

from ..config import ServerConfig
from ..core_wire import search_request_from_pb
from ..domain.profiles import PROFILES, resolve_settings
from ..domain.search_settings import SearchSettings
from .decision_options import asked_dispatcher, asked_predictor
from .interruption import NEVER, Interruption
from .limits import (
    DEFAULT_LIMITS,
    check_distinct_types,
    check_id,
    check_job_texts,
    check_snapshot_limits,
    check_text,
    check_types,
)
from .shown import key_path, shown
from .violations import MAX_REPORTED, Violation, Violations

__all__ = ["MAX_AMOUNT", "MAX_DURATION", "MAX_REPORTED", "MAX_TIME", "NodeCheck", "Violation",
           "Violations", "check_contents", "check_nodes", "check_options", "check_queued",
           "check_queued_job", "check_running_job", "check_sizes", "check_time",
           "validate_completions", "validate_dispatch_request"]

# Bounds that keep every model's arithmetic (weights × horizon × jobs) inside 64-bit integers.
MAX_TIME = 2**40  # |t|, submit and start times, seconds
MAX_DURATION = 2**31  # requested, expected and actual durations (about 68 years), seconds
MAX_AMOUNT = 2**40  # one node's capacity or one unit's request of a resource type


@dataclass(frozen=True, slots=True)
class NodeCheck:
    """The node list's own violations, and each valid node id's capacity."""

    capacity: dict[str, dict[str, int]]
    violations: tuple[Violation, ...]


def check_nodes(
    request: pb.DispatchRequest, config: ServerConfig = DEFAULT_LIMITS,
    interruption: Interruption = NEVER,
) -> NodeCheck:
    """The node list's violations, its limits first: a list beyond them is not converted."""
    out = Violations()
    capacity = _check_nodes(request, config, out, interruption)
    return NodeCheck(capacity, tuple(out.items))


def validate_dispatch_request(
    request: pb.DispatchRequest,
    config: ServerConfig,
    known_predictors: list[int],
    nodes: NodeCheck | None = None,
    interruption: Interruption = NEVER,
) -> list[Violation]:
    """Every violation of `request`, the reference the fast intake agrees with
    (server/intake/snapshot_intake.py); `nodes` is `check_nodes(request, config)` if the caller
    has it."""
    out = Violations()
    check_sizes(request, config, out)
    if out.items:
        return out.items  # a snapshot beyond the limits is not inspected further
    check_snapshot_limits(request, config, out, interruption)
    if out.items:
        return out.items
    check_options(request, known_predictors, config.default_profile, out)
    if nodes is None:
        nodes = check_nodes(request, config, interruption)
    check_contents(request, config, nodes, out, interruption)
    return out.items


def check_contents(
    request: pb.DispatchRequest, config: ServerConfig, nodes: NodeCheck, out: Violations,
    interruption: Interruption = NEVER,
) -> None:
    """What follows the sizes, the limits and the options: the node list's own violations
    (`nodes`), the running jobs on those nodes, the queued jobs, and job ids unique over both."""
    for violation in nodes.violations:
        out.add(violation.field, violation.description)
    capacity = nodes.capacity
    ids: Counter[str] = Counter()
    _check_running(request, capacity, ids, config, out, interruption)
    check_queued(request, {r for cap in capacity.values() for r in cap}, ids, config, out,
                 interruption)


def check_time(value: int, path: str, out: Violations) -> None:
    if abs(value) > MAX_TIME:
        out.add(path, f"{value} is beyond ±2^40 seconds")


def check_duration(value: int, path: str, out: Violations) -> None:
    if value <= 0:
        out.add(path, "must be > 0 seconds")
    elif value > MAX_DURATION:
        out.add(path, f"{value} s is longer than 2^31 s")


def check_sizes(request: pb.DispatchRequest, config: ServerConfig, out: Violations) -> None:
    """The size limits (nodes, jobs, the cluster's and the profile's names) and the snapshot's
    time: a snapshot beyond them is not inspected further."""
    check_time(request.time, "time", out)
    check_id(request.cluster, "cluster", config, out)
    check_id(request.search.profile, "search.profile", config, out)
    check_id(request.dispatcher_name, "dispatcher_name", config, out)
    check_id(request.predictor_name, "predictor_name", config, out)
    if len(request.nodes) > config.max_nodes:
        out.add("nodes", f"{len(request.nodes)} nodes exceed the limit of {config.max_nodes}")
    jobs = len(request.running_jobs) + len(request.queued_jobs)
    if jobs > config.max_jobs:
        out.add("queued_jobs", f"{jobs} running + queued jobs exceed the limit of "
                f"{config.max_jobs}")


def check_options(
    request: pb.DispatchRequest | pb.UpdateSessionRequest, predictors: list[int],
    default_profile: str, out: Violations,
) -> SearchSettings | None:
    """The decision options of a snapshot or a session delta (dispatcher, predictor, allocator,
    search); returns the search settings they resolve to (None for an unknown profile)."""
    dispatcher, predictor = asked_dispatcher(request), asked_predictor(request)
    if dispatcher.field:
        out.add(dispatcher.field, dispatcher.why)
    if predictor.field:
        out.add(predictor.field, predictor.why)
    elif predictor.kind and predictor.kind not in predictors:
        out.add("predictor_name" if request.predictor_name else "predictor",
                f"predictor {predictor_name(predictor.kind)!r} is not available on this server")
    if request.allocator not in pb.Allocator.values():
        out.add("allocator", f"unknown allocator value {request.allocator}")
    search = request.search
    if search.profile and search.profile not in PROFILES:
        out.add("search.profile", f"unknown profile {shown(search.profile)}; one of "
                f"{sorted(PROFILES)}")
    for name in ("delta_ms", "delta_max_ms", "k", "window", "reservation_depth",
                 "lookahead_depth", "easy_head_depth"):
        if search.HasField(name) and getattr(search, name) < 1:
            out.add(f"search.{name}", "must be >= 1")
    if search.HasField("stall_ms") and search.stall_ms < 0:
        out.add("search.stall_ms", "must be >= 0")
    if search.HasField("starvation_wait_s") and search.starvation_wait_s < 0:
        out.add("search.starvation_wait_s", "must be >= 0")
    if search.HasField("promise_after_s") and search.promise_after_s < -1:
        out.add("search.promise_after_s", "must be >= -1 (-1: no promises)")
    if search.profile and search.profile not in PROFILES:
        return None
    # δ <= δmax once the profile's defaults fill what the request leaves unset.
    resolved = resolve_settings(search_request_from_pb(search), default_profile)
    if resolved.delta_max_ms < resolved.delta_ms:
        out.add("search.delta_max_ms", f"δmax {resolved.delta_max_ms} ms is below "
                f"δ {resolved.delta_ms} ms")
    return resolved


_NODE_STATES = (pb.NODE_STATE_UP, pb.NODE_STATE_DOWN, pb.NODE_STATE_DRAINED)
NODE_STATE_RULE = "must be NODE_STATE_UP, NODE_STATE_DOWN or NODE_STATE_DRAINED"


def check_capacity_amounts(path: str, capacity: Mapping[str, int], out: Violations) -> None:
    """A node's capacity at `path`: every resource type named, every amount in (0, 2^40]."""
    for resource, amount in capacity.items():
        if not resource:
            out.add(path, "resource type names must not be empty")
        if not 0 < amount <= MAX_AMOUNT:
            out.add(key_path(path, resource), f"must be > 0 and <= 2^40, got {amount}")


def _check_nodes(
    request: pb.DispatchRequest, config: ServerConfig, out: Violations,
    interruption: Interruption,
) -> dict[str, dict[str, int]]:
    capacity: dict[str, dict[str, int]] = {}
    if not request.nodes:
        out.add("nodes", "a snapshot needs at least one node")
    for i, node in enumerate(request.nodes):  # the limits first: nothing beyond them is kept
        check_id(node.id, f"nodes[{i}].id", config, out)
        check_types(node.capacity, f"nodes[{i}].capacity", config, out)
        interruption.tick()
        if out.full:
            return capacity
    if out.items or not check_distinct_types((n.capacity for n in request.nodes), "nodes",
                                             config, out):
        return capacity
    for i, node in enumerate(request.nodes):
        interruption.tick()
        node_id, cap = node.id, dict(node.capacity)
        if not node_id:
            out.add(f"nodes[{i}].id", "must not be empty")
        elif node_id in capacity:
            out.add(f"nodes[{i}].id", f"duplicate node id {shown(node_id)}")
        else:
            capacity[node_id] = cap
        if node.state not in _NODE_STATES:
            out.add(f"nodes[{i}].state", NODE_STATE_RULE)
        if not cap:
            out.add(f"nodes[{i}].capacity", "must name at least one resource type")
        elif "" in cap or min(cap.values()) <= 0 or max(cap.values()) > MAX_AMOUNT:
            check_capacity_amounts(f"nodes[{i}].capacity", cap, out)
        if out.full:
            break
    return capacity


def _check_running(
    request: pb.DispatchRequest,
    capacity: dict[str, dict[str, int]],
    ids: Counter[str],
    config: ServerConfig,
    out: Violations,
    interruption: Interruption,
) -> None:
    usage: dict[str, Counter[str]] = {}  # node -> held by the running jobs so far
    reported: set[tuple[str, str]] = set()

    def held_on(node_id: str) -> Counter[str]:
        return usage.setdefault(node_id, Counter())

    for i, job in enumerate(request.running_jobs):
        _check_id(job.id, "running_jobs", i, ids, out)
        check_running_job(job, f"running_jobs[{i}]", request.time, capacity.get, held_on,
                          reported, out, config)
        interruption.tick(1 + len(job.units))
        if out.full:
            return


def check_running_job(
    job: pb.RunningJob,
    path: str,
    t: int,
    capacity_of: Callable[[str], Mapping[str, int] | None],
    held_on: Callable[[str], Counter[str]],
    reported: set[tuple[str, str]],
    out: Violations,
    config: ServerConfig = DEFAULT_LIMITS,
) -> None:
    """One running job (a snapshot's, or one a session delta starts) at time t: its texts and
    units within `config`'s limits (a job beyond them is not walked further), its times, and
    each unit on a known node, within what the node has once the jobs before it hold
    theirs. `capacity_of(node)`: the node's capacity (None: unknown node); `held_on(node)`:
    what is held on it so far, added to here; `reported`: (node, resource) pairs already said
    to be over capacity, so each is said once."""
    check_job_texts(job, path, config, out)
    if len(job.units) > config.max_units:
        out.add(f"{path}.units", f"{len(job.units)} units exceed the limit of "
                f"{config.max_units} (max_units)")
        return
    if job.start_time > t:
        out.add(f"{path}.start_time", f"{job.start_time} is after the snapshot time {t}")
    check_time(job.start_time, f"{path}.start_time", out)
    check_duration(job.requested_time, f"{path}.requested_time", out)
    if job.HasField("expected_duration"):
        check_duration(job.expected_duration, f"{path}.expected_duration", out)
    if not job.units:
        out.add(f"{path}.units", "a running job holds at least one unit")
    for u, unit in enumerate(job.units):
        node_id = unit.node_id
        node_cap = capacity_of(node_id)
        if node_cap is None:
            out.add(f"{path}.units[{u}].node_id", f"unknown node {shown(node_id)}")
            continue
        if not check_types(unit.amounts, f"{path}.units[{u}].amounts", config, out):
            continue
        for resource, amount in unit.amounts.items():
            if amount <= 0:
                if amount < 0:
                    out.add(key_path(f"{path}.units[{u}].amounts", resource),
                            f"must be >= 0, got {amount}")
                continue
            cap = node_cap.get(resource)
            if cap is None:
                out.add(key_path(f"{path}.units[{u}].amounts", resource),
                        f"node {shown(node_id)} has no resource {shown(resource)}")
                continue
            held = held_on(node_id)
            held[resource] += amount
            if held[resource] > cap and (node_id, resource) not in reported:
                reported.add((node_id, resource))
                out.add(f"{path}.units[{u}]",
                        f"running jobs hold {held[resource]} {shown(resource)} on node "
                        f"{shown(node_id)}, more than its capacity {cap}")


def check_queued(
    request: pb.DispatchRequest,
    known_types: AbstractSet[str],
    ids: Counter[str],
    config: ServerConfig,
    out: Violations,
    interruption: Interruption = NEVER,
) -> None:
    """The queued jobs; `known_types`: the resource types some valid node has."""
    oracle = asked_predictor(request).kind == pb.PREDICTOR_ORACLE
    for i, job in enumerate(request.queued_jobs):
        path = f"queued_jobs[{i}]"
        _check_id(job.id, "queued_jobs", i, ids, out)
        check_queued_job(job, path, request.time, known_types, config.max_units, oracle, out,
                         config)
        interruption.tick()
        if out.full:
            return


def check_queued_job(
    job: pb.QueuedJob, path: str, t: int, known_types: AbstractSet[str], max_units: int,
    oracle: bool, out: Violations, config: ServerConfig = DEFAULT_LIMITS,
) -> None:
    """One queued job (a snapshot's, or one a session delta submits) at time t, all but its
    id's uniqueness; `oracle`: the ORACLE predictor is asked for, which needs its actual
    duration."""
    check_job_texts(job, path, config, out)
    if job.submit_time > t:
        out.add(f"{path}.submit_time", f"{job.submit_time} is after the snapshot time {t}")
    check_units(job.units, f"{path}.units", max_units, out)
    check_time(job.submit_time, f"{path}.submit_time", out)
    check_duration(job.requested_time, f"{path}.requested_time", out)
    if check_types(job.unit_request, f"{path}.unit_request", config, out):
        check_unit_request(job.unit_request, f"{path}.unit_request", known_types, out)
    if job.HasField("promised_start"):
        check_time(job.promised_start, f"{path}.promised_start", out)
    if job.HasField("actual_duration"):
        check_duration(job.actual_duration, f"{path}.actual_duration", out)
    elif oracle:
        out.add(f"{path}.actual_duration", "the ORACLE predictor needs every queued job's "
                "actual duration")


def _check_id(job_id: str, kind: str, i: int, ids: Counter[str], out: Violations) -> None:
    if not job_id:
        out.add(f"{kind}[{i}].id", "must not be empty")
        return
    ids[job_id] += 1
    if ids[job_id] == 2:
        out.add(f"{kind}[{i}].id", f"duplicate job id {shown(job_id)}")


def check_units(units: int, path: str, max_units: int, out: Violations) -> None:
    """rn_i: at least one unit, at most the server's `max_units`."""
    if units < 1:
        out.add(path, f"must be >= 1, got {units}")
    elif units > max_units:
        out.add(path, f"{units} units exceed the limit of {max_units}")


def check_unit_request(
    unit_request: Mapping[str, int], path: str,
    known_types: AbstractSet[str] | None, out: Violations,
) -> None:
    """One unit's request: named resource types, each amount in (0, 2^40]; with `known_types`,
    only types some node has."""
    if not unit_request:
        out.add(path, "must request at least one resource type")
    for resource, amount in unit_request.items():
        if not 0 < amount <= MAX_AMOUNT:
            out.add(key_path(path, resource), f"must be > 0 and <= 2^40, got {amount}")
        elif not resource:
            out.add(path, "resource type names must not be empty")
        elif known_types is not None and resource not in known_types:
            out.add(key_path(path, resource), f"no node has resource type {shown(resource)}")


def validate_completions(
    request: pb.ReportCompletionsRequest, config: ServerConfig
) -> list[Violation]:
    """Every violation of a completion report, checked as strictly as a snapshot's queued jobs.

    A finished job needs its id and user (the predictors key on them), texts within the limits
    (`max_id_chars`, `max_name_chars`: they are kept in the knowledge base), 1..`max_units`
    units, a unit request like a queued job's, a requested time in (0, 2^31] s, start and end times
    within ±2^40 s, and an actual run time (end - start) in [0, 2^31] s. The report is
    all-or-nothing: the service stores none of it when any completion is invalid.
    """
    out = Violations()
    if len(request.completions) > config.max_jobs:
        out.add("completions", f"{len(request.completions)} completions exceed the limit of "
                f"{config.max_jobs} per report")
        return out.items
    check_id(request.cluster, "cluster", config, out)
    for i, completion in enumerate(request.completions):
        path = f"completions[{i}]"
        check_id(completion.job_id, f"{path}.job_id", config, out)
        check_id(completion.user, f"{path}.user", config, out)
        check_id(completion.queue, f"{path}.queue", config, out)
        check_text(completion.name, f"{path}.name", config.max_name_chars, "max_name_chars",
                   out)
        if not completion.job_id:
            out.add(f"{path}.job_id", "must not be empty")
        if not completion.user:
            out.add(f"{path}.user", "must not be empty")
        check_units(completion.units, f"{path}.units", config.max_units, out)
        if check_types(completion.unit_request, f"{path}.unit_request", config, out):
            check_unit_request(completion.unit_request, f"{path}.unit_request", None, out)
        check_duration(completion.requested_time, f"{path}.requested_time", out)
        check_time(completion.start_time, f"{path}.start_time", out)
        check_time(completion.end_time, f"{path}.end_time", out)
        if completion.end_time < completion.start_time:
            out.add(f"{path}.end_time", f"{completion.end_time} is before start_time "
                    f"{completion.start_time}")
        elif abs(completion.start_time) <= MAX_TIME and abs(completion.end_time) <= MAX_TIME:
            run_time = completion.end_time - completion.start_time
            if run_time > MAX_DURATION:
                out.add(f"{path}.end_time", f"run time {run_time} s (end_time - start_time) is "
                        "longer than 2^31 s")
        if out.full:
            break
    return out.items
