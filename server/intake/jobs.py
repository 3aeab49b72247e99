"""The rules of jobs, limits and validity together: the running and queued jobs of a snapshot, the
jobs a session delta submits, starts, ends and cancels, and what a session's jobs hold once a
delta applies (a completion report's finished jobs: server/intake/completions.py).

Limits first: texts within `max_id_chars` / `max_name_chars`, a job's units within `max_units`
and the running jobs' within `max_total_units`, at most `max_jobs` jobs; a job beyond them is
not walked further. Then each job: times within ±2^40 s, durations in (0, 2^31] s, its units on
known nodes within what they hold (running) or its request on types some node has (queued), and
ids non-empty and unique; a queued job's priority in [0, 2^40], its partitions and required
features as labels (`fields.check_labels`), its OR of feature terms each a non-empty list of
labels, its reservation's name within `max_id_chars`. A queued job whose partitions, features
or reservation no node satisfies is not a violation: the workload manager accepted it, a node
may join or come back, and one such job must not make the whole snapshot invalid; it never
starts (skipped SKIP_REASON_NEVER_FITS).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from collections.abc import Set as AbstractSet

from hpcdispatch.v1 import dispatcher_pb2 as pb

from ..config import ServerConfig
from .decision_options import asked_predictor
from .fields import (
    DEFAULT_LIMITS,
    MAX_DURATION,
    MAX_TIME,
    check_id,
    check_labels,
    check_request,
    check_text,
    check_types,
)
from .interruption import NEVER, Interruption
from .shown import key_path, shown
from .violations import Violations


def check_time(value: int, path: str, out: Violations) -> None:
    if abs(value) > MAX_TIME:
        out.add(path, f"{value} is beyond ±2^40 seconds")


def check_duration(value: int, path: str, out: Violations) -> None:
    if value <= 0:
        out.add(path, "must be > 0 seconds")
    elif value > MAX_DURATION:
        out.add(path, f"{value} s is longer than 2^31 s")


MAX_PRIORITY = 2**40  # far beyond Slurm's 32-bit priorities; keeps (priority, q_i) in int64


def check_job_rules(job: pb.QueuedJob, path: str, config: ServerConfig,
                    out: Violations) -> None:
    """A queued job's priority, partitions, required features, its OR of feature terms and
    its reservation's name."""
    if not 0 <= job.priority <= MAX_PRIORITY:
        out.add(f"{path}.priority", f"must be >= 0 and <= 2^40, got {job.priority}")
    check_labels(job.partitions, f"{path}.partitions", config, out)
    check_labels(job.required_features, f"{path}.required_features", config, out)
    if job.feature_alternatives:
        check_feature_terms(job.feature_alternatives, f"{path}.feature_alternatives", config,
                            out)
    check_id(job.reservation, f"{path}.reservation", config, out)


def check_feature_terms(terms: Sequence[pb.FeatureTerm], path: str, config: ServerConfig,
                        out: Violations) -> None:
    """An OR of AND-terms: at most `max_labels` terms, each a non-empty list of labels."""
    if len(terms) > config.max_labels:
        out.add(path, f"{len(terms)} terms exceed the limit of {config.max_labels} "
                "(max_labels)")
        return
    for k, term in enumerate(terms):
        if not term.features:
            out.add(f"{path}[{k}].features", "a term names at least one feature")
        else:
            check_labels(term.features, f"{path}[{k}].features", config, out)


def check_units(units: int, path: str, max_units: int, out: Violations) -> None:
    """rn_i: at least one unit, at most the server's `max_units`."""
    if units < 1:
        out.add(path, f"must be >= 1, got {units}")
    elif units > max_units:
        out.add(path, f"{units} units exceed the limit of {max_units}")


def check_job_count(
    request: pb.DispatchRequest | pb.UpdateSessionRequest, config: ServerConfig,
    out: Violations,
) -> None:
    """`max_jobs`: a snapshot's running and queued jobs; each list of a delta."""
    if isinstance(request, pb.DispatchRequest):
        jobs = len(request.running_jobs) + len(request.queued_jobs)
        if jobs > config.max_jobs:
            out.add("queued_jobs", f"{jobs} running + queued jobs exceed the limit of "
                    f"{config.max_jobs}")
        return
    for name in ("ended_job_ids", "cancelled_job_ids", "submitted", "started"):
        items = len(getattr(request, name))
        if items > config.max_jobs:
            out.add(name, f"{items} jobs exceed the limit of {config.max_jobs} (max_jobs)")


def check_session_jobs(jobs: int, config: ServerConfig, out: Violations) -> None:
    """`max_jobs`: the running and queued jobs of a session once a delta applies."""
    if jobs > config.max_jobs:
        out.add("submitted", f"{jobs} running + queued jobs exceed the limit of "
                f"{config.max_jobs}")


def check_listed_ids(request: pb.UpdateSessionRequest, config: ServerConfig,
                     out: Violations) -> None:
    """The ids a delta ends and cancels, within `max_id_chars`."""
    for name in ("ended_job_ids", "cancelled_job_ids"):
        for i, job_id in enumerate(getattr(request, name)):
            check_id(job_id, f"{name}[{i}]", config, out)


def check_job_texts(
    job: pb.RunningJob | pb.QueuedJob, path: str, config: ServerConfig, out: Violations,
) -> bool:
    """A job's id, user, name (and a queued job's queue) within their lengths."""
    if job_texts_within(job, config):
        return True
    ok = check_id(job.id, f"{path}.id", config, out)
    ok = check_id(job.user, f"{path}.user", config, out) and ok
    ok = check_text(job.name, f"{path}.name", config.max_name_chars, "max_name_chars",
                    out) and ok
    if isinstance(job, pb.QueuedJob):
        ok = check_id(job.queue, f"{path}.queue", config, out) and ok
        ok = check_id(job.account, f"{path}.account", config, out) and ok
    return ok


def job_texts_within(job: pb.RunningJob | pb.QueuedJob, config: ServerConfig) -> bool:
    """`check_job_texts` without saying why (the fast paths)."""
    limit = config.max_id_chars
    return (len(job.id) <= limit and len(job.user) <= limit
            and len(job.name) <= config.max_name_chars
            and (not isinstance(job, pb.QueuedJob)
                 or (len(job.queue) <= limit and len(job.account) <= limit)))


def check_job_limits(
    request: pb.DispatchRequest, config: ServerConfig, out: Violations,
    interruption: Interruption = NEVER,
) -> None:
    """A snapshot's jobs within the limits: texts, the running jobs' units, the queued jobs'
    resource types; stops once `out` is full."""
    for i, running in enumerate(request.running_jobs):
        check_job_texts(running, f"running_jobs[{i}]", config, out)
        interruption.tick()
        if out.full:
            return
    check_running_units(request.running_jobs, "running_jobs", config, out, interruption)
    for i, queued in enumerate(request.queued_jobs):
        check_job_texts(queued, f"queued_jobs[{i}]", config, out)
        check_types(queued.unit_request, f"queued_jobs[{i}].unit_request", config, out)
        interruption.tick()
        if out.full:
            return


def check_running_units(
    jobs: Collection[pb.RunningJob], path: str, config: ServerConfig, out: Violations,
    interruption: Interruption = NEVER,
) -> bool:
    """Each running job's unit list within `max_units`, and all of them within
    `max_total_units`; each unit's amounts within the resource-type limits."""
    total, ok = 0, True
    for i, job in enumerate(jobs):
        units = len(job.units)
        total += units
        interruption.tick(1 + units)
        if units > config.max_units:
            out.add(f"{path}[{i}].units", f"{units} units exceed the limit of "
                    f"{config.max_units} (max_units)")
            ok = False
            continue
        if total > config.max_total_units:
            out.add(path, f"the running jobs hold more than {config.max_total_units} units, "
                    "the limit (max_total_units)")
            return False
        for u, unit in enumerate(job.units):
            ok = check_id(unit.node_id, f"{path}[{i}].units[{u}].node_id", config, out) and ok
            ok = check_types(unit.amounts, f"{path}[{i}].units[{u}].amounts", config, out) and ok
        if out.full:
            return False
    return ok


def check_session_units(held: int, started: int, config: ServerConfig,
                        out: Violations) -> None:
    """`max_total_units`: the units a session's running jobs would hold, `held` by those still
    running and `started` by the jobs a delta starts."""
    if held + started > config.max_total_units:
        out.add("started", f"the session's running jobs would hold {held + started} units, "
                f"more than the limit of {config.max_total_units} (max_total_units)")


def check_running(
    request: pb.DispatchRequest,
    capacity: dict[str, dict[str, int]],
    ids: Counter[str],
    config: ServerConfig,
    out: Violations,
    interruption: Interruption = NEVER,
) -> None:
    """A snapshot's running jobs on the nodes of `capacity` (valid node id -> capacity);
    `ids` counts the job ids seen."""
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
    check_request(job.unit_request, f"{path}.unit_request", known_types, config, out)
    check_job_rules(job, path, config, out)
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
