"""A snapshot's validation, the reference: every problem found, each named by its field path.

The service turns the violations into INVALID_ARGUMENT with a google.rpc.BadRequest. Field paths
use the proto field names, e.g. `queued_jobs[3].unit_request["gpu"]`. The order of the passes is
this module's; each rule, its limit and its validity, is its part's: the fields they share
(`fields`), the node list (`nodes`), the jobs (`jobs`), the decision options
(`decision_options`); a completion report's are in `completions`.

1. the sizes (nodes, jobs, the names asked for) and the snapshot's time: a snapshot beyond
   them is not inspected further;
2. the other limits (string lengths, resource types, units), in one bounded pass that never
   looks inside an item beyond its limits;
3. the options; then the node list, the running jobs on those nodes, the queued jobs, and job
   ids unique over both.
"""

from __future__ import annotations

from collections import Counter

from hpcdispatch.v1 import dispatcher_pb2 as pb

from ..config import ServerConfig
from .completions import validate_completions
from .decision_options import check_option_limits, check_options
from .fields import MAX_AMOUNT, MAX_DURATION, MAX_TIME, check_id
from .interruption import NEVER, Interruption
from .jobs import (
    check_job_count,
    check_job_limits,
    check_queued,
    check_queued_job,
    check_running,
    check_running_job,
    check_time,
)
from .nodes import NodeCheck, check_node_count, check_node_limits, check_nodes, check_windows
from .violations import MAX_REPORTED, Violation, Violations

# The names other rooms import from here (each defined in its part's module).
__all__ = ["MAX_AMOUNT", "MAX_DURATION", "MAX_REPORTED", "MAX_TIME", "NodeCheck", "Violation",
           "Violations", "check_contents", "check_nodes", "check_options", "check_queued",
           "check_queued_job", "check_running_job", "check_sizes", "check_snapshot_limits",
           "check_time", "validate_completions", "validate_dispatch_request"]


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


def check_sizes(request: pb.DispatchRequest, config: ServerConfig, out: Violations) -> None:
    """The size limits (nodes, jobs, the cluster's and the options' names) and the snapshot's
    time: a snapshot beyond them is not inspected further."""
    check_time(request.time, "time", out)
    check_id(request.cluster, "cluster", config, out)
    check_option_limits(request, config, out)
    check_node_count(request, config, out)
    check_job_count(request, config, out)


def check_snapshot_limits(
    request: pb.DispatchRequest, config: ServerConfig, out: Violations,
    interruption: Interruption = NEVER,
) -> None:
    """Every limit of a full snapshot beyond its sizes, in one bounded pass: the nodes', then
    the jobs'."""
    check_node_limits(request, config, out, interruption)
    if out.full:
        return
    check_job_limits(request, config, out, interruption)


def check_contents(
    request: pb.DispatchRequest, config: ServerConfig, nodes: NodeCheck, out: Violations,
    interruption: Interruption = NEVER,
) -> None:
    """What follows the sizes, the limits and the options: the node list's own violations
    (`nodes`), the running jobs on those nodes, the queued jobs, job ids unique over both, and
    the unavailability windows on those nodes."""
    for violation in nodes.violations:
        out.add(violation.field, violation.description)
    capacity = nodes.capacity
    ids: Counter[str] = Counter()
    check_running(request, capacity, ids, config, out, interruption)
    check_queued(request, {r for cap in capacity.values() for r in cap}, ids, config, out,
                 interruption)
    if request.windows and not out.full:
        check_windows(request.windows, "windows", capacity.keys(), config, out)
