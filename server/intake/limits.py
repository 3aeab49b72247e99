"""The limits on what one request can make the service hold or do, checked before any costly
stage: string lengths, resource types, units per job and in all (the sizes of the repeated
fields, nodes and jobs, are checked with the snapshot's sizes in validation.py).

Each limit is a configuration key (server/config.py, docs/configuration.md); a request beyond
one is answered INVALID_ARGUMENT naming the field and the limit. A snapshot is checked against
them in one pass over its items that never looks inside an item beyond its limits (a running
job with more units than `max_units` is not walked), so the pass costs what the request's
size allows and no more.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from hpcdispatch.v1 import dispatcher_pb2 as pb

from ..config import ServerConfig
from .interruption import NEVER, Interruption
from .shown import shown
from .violations import Violations

DEFAULT_LIMITS = ServerConfig()


def check_text(value: str, path: str, limit: int, key: str, out: Violations) -> bool:
    """A string field of at most `limit` characters (the configuration `key` names it)."""
    if len(value) <= limit:
        return True
    out.add(path, f"{len(value)} characters exceed the limit of {limit} ({key})")
    return False


def check_id(value: str, path: str, config: ServerConfig, out: Violations) -> bool:
    return check_text(value, path, config.max_id_chars, "max_id_chars", out)


def check_types(
    amounts: Mapping[str, int], path: str, config: ServerConfig, out: Violations,
) -> bool:
    """A map of resource types: at most `max_resource_types` entries, each name at most
    `max_id_chars` long."""
    if len(amounts) > config.max_resource_types:
        out.add(path, f"{len(amounts)} resource types exceed the limit of "
                f"{config.max_resource_types} (max_resource_types)")
        return False
    ok = True
    for resource in amounts:
        if len(resource) > config.max_id_chars:
            out.add(path, f"resource type {shown(resource)} is longer than the limit of "
                    f"{config.max_id_chars} characters (max_id_chars)")
            ok = False
    return ok


def types_within(amounts: Mapping[str, int], config: ServerConfig) -> bool:
    """`check_types` without saying why (the fast paths)."""
    return len(amounts) <= config.max_resource_types and all(
        len(r) <= config.max_id_chars for r in amounts)


def check_job_texts(
    job: pb.RunningJob | pb.QueuedJob, path: str, config: ServerConfig, out: Violations,
) -> bool:
    """A job's id, user, name (and a queued job's queue) within their lengths."""
    ok = check_id(job.id, f"{path}.id", config, out)
    ok = check_id(job.user, f"{path}.user", config, out) and ok
    ok = check_text(job.name, f"{path}.name", config.max_name_chars, "max_name_chars",
                    out) and ok
    if isinstance(job, pb.QueuedJob):
        ok = check_id(job.queue, f"{path}.queue", config, out) and ok
    return ok


def job_texts_within(job: pb.RunningJob | pb.QueuedJob, config: ServerConfig) -> bool:
    """`check_job_texts` without saying why (the fast paths)."""
    limit = config.max_id_chars
    return (len(job.id) <= limit and len(job.user) <= limit
            and len(job.name) <= config.max_name_chars
            and (not isinstance(job, pb.QueuedJob) or len(job.queue) <= limit))


def check_distinct_types(
    capacities: Iterable[Mapping[str, int]], path: str, config: ServerConfig, out: Violations,
) -> bool:
    """The resource types the nodes name, together, at most `max_resource_types`."""
    seen: set[str] = set()
    for capacity in capacities:
        seen.update(capacity)
        if len(seen) > config.max_resource_types:
            out.add(path, f"the nodes name more than {config.max_resource_types} resource "
                    "types, the limit (max_resource_types)")
            return False
    return True


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


def check_snapshot_limits(
    request: pb.DispatchRequest, config: ServerConfig, out: Violations,
    interruption: Interruption = NEVER,
) -> None:
    """Every limit of a full snapshot beyond its sizes (nodes, jobs, names: validation's
    `check_sizes`), in one bounded pass."""
    for i, node in enumerate(request.nodes):
        check_id(node.id, f"nodes[{i}].id", config, out)
        check_types(node.capacity, f"nodes[{i}].capacity", config, out)
        interruption.tick()
        if out.full:
            return
    if not out.items:
        check_distinct_types((n.capacity for n in request.nodes), "nodes", config, out)
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
