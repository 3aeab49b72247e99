"""The rules of the node list, limits and validity together: a snapshot's nodes, a session
delta's node changes, and the nodes a session holds once a delta applies.

Limits first: ids and capacities within `max_id_chars` and `max_resource_types`, at most
`max_nodes` nodes, and the types all nodes name together within `max_resource_types`; a node
list beyond them is not converted. Then each node: a unique non-empty id, a known state, a
capacity naming at least one resource type with every amount in (0, 2^40], and its partitions
and features as labels (`fields.check_labels`).

The unavailability windows on those nodes (a snapshot's, a delta's) are checked here too: at
most `max_nodes` windows, each naming at least one node, each a node of the snapshot (of the
session after the delta's node changes) and named once, times within ±2^40 s and
end_time > start_time, its users and accounts as labels, its name within `max_id_chars`.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass

from hpcdispatch.v1 import dispatcher_pb2 as pb

from ..config import ServerConfig
from .fields import (
    DEFAULT_LIMITS,
    MAX_AMOUNT,
    MAX_TIME,
    check_capacity_amounts,
    check_id,
    check_labels,
    check_types,
)
from .interruption import NEVER, Interruption
from .shown import shown
from .violations import Violation, Violations

_NODE_STATES = (pb.NODE_STATE_UP, pb.NODE_STATE_DOWN, pb.NODE_STATE_DRAINED)
NODE_STATE_RULE = "must be NODE_STATE_UP, NODE_STATE_DOWN or NODE_STATE_DRAINED"


@dataclass(frozen=True, slots=True)
class NodeCheck:
    """The node list's own violations, and each valid node id's capacity."""

    capacity: dict[str, dict[str, int]]
    violations: tuple[Violation, ...]


def check_node_count(
    request: pb.DispatchRequest | pb.UpdateSessionRequest, config: ServerConfig,
    out: Violations,
) -> None:
    """`max_nodes`: a snapshot's nodes, a delta's node changes."""
    if isinstance(request, pb.DispatchRequest):
        if len(request.nodes) > config.max_nodes:
            out.add("nodes", f"{len(request.nodes)} nodes exceed the limit of {config.max_nodes}")
    elif len(request.node_changes) > config.max_nodes:
        out.add("node_changes", f"{len(request.node_changes)} node changes exceed the limit of "
                f"{config.max_nodes} (max_nodes)")


def check_session_nodes(nodes: int, config: ServerConfig, out: Violations) -> None:
    """`max_nodes`: the nodes a session would hold once a delta's node changes apply."""
    if nodes > config.max_nodes:
        out.add("node_changes", f"{nodes} nodes exceed the limit of {config.max_nodes}")


def check_node_limits(
    request: pb.DispatchRequest, config: ServerConfig, out: Violations,
    interruption: Interruption = NEVER,
) -> None:
    """Each node's id and capacity within the limits, then (when nothing is wrong so far) the
    resource types all nodes name."""
    for i, node in enumerate(request.nodes):
        check_id(node.id, f"nodes[{i}].id", config, out)
        check_types(node.capacity, f"nodes[{i}].capacity", config, out)
        check_node_labels(node, f"nodes[{i}]", config, out)
        interruption.tick()
        if out.full:
            return
    if not out.items:
        check_distinct_types((n.capacity for n in request.nodes), "nodes", config, out)


def check_node_change_limits(
    request: pb.UpdateSessionRequest, config: ServerConfig, out: Violations,
) -> None:
    """A delta's node changes: each id and capacity within the limits."""
    for i, change in enumerate(request.node_changes):
        check_id(change.id, f"node_changes[{i}].id", config, out)
        check_types(change.capacity, f"node_changes[{i}].capacity", config, out)
        if change.HasField("labels"):
            check_node_labels(change.labels, f"node_changes[{i}].labels", config, out)


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


def check_session_types(types: int, config: ServerConfig, out: Violations) -> bool:
    """`max_resource_types`: the types a session's nodes would name once a delta applies."""
    if types <= config.max_resource_types:
        return True
    out.add("node_changes", f"the nodes would name {types} resource types, more than "
            f"the limit of {config.max_resource_types} (max_resource_types)")
    return False


def check_nodes(
    request: pb.DispatchRequest, config: ServerConfig = DEFAULT_LIMITS,
    interruption: Interruption = NEVER,
) -> NodeCheck:
    """The node list's violations, its limits first: a list beyond them is not converted."""
    out = Violations()
    capacity: dict[str, dict[str, int]] = {}
    if not request.nodes:
        out.add("nodes", "a snapshot needs at least one node")
    check_node_limits(request, config, out, interruption)
    if not out.items:
        _check_each_node(request, capacity, out, interruption)
    return NodeCheck(capacity, tuple(out.items))


def _check_each_node(
    request: pb.DispatchRequest, capacity: dict[str, dict[str, int]], out: Violations,
    interruption: Interruption,
) -> None:
    """Each node within the limits: its id, state and capacity, kept in `capacity` by id."""
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


def check_node_labels(node: pb.Node | pb.NodeLabels, path: str, config: ServerConfig,
                      out: Violations) -> bool:
    ok = check_labels(node.partitions, f"{path}.partitions", config, out)
    return check_labels(node.features, f"{path}.features", config, out) and ok


def check_windows(
    windows: Sequence[pb.UnavailabilityWindow], path: str, node_ids: Container[str],
    config: ServerConfig, out: Violations,
) -> None:
    """Unavailability windows on the nodes `node_ids` (the valid ones of the snapshot, or the
    session's after the delta)."""
    if len(windows) > config.max_nodes:
        out.add(path, f"{len(windows)} windows exceed the limit of {config.max_nodes} "
                "(max_nodes)")
        return
    for w, window in enumerate(windows):
        at = f"{path}[{w}]"
        _check_window_nodes(window.node_ids, f"{at}.node_ids", node_ids, config, out)
        for name, value in (("start_time", window.start_time), ("end_time", window.end_time)):
            if abs(value) > MAX_TIME:
                out.add(f"{at}.{name}", f"{value} is beyond ±2^40 seconds")
        if window.end_time <= window.start_time:
            out.add(f"{at}.end_time", f"must be > start_time ({window.start_time}), got "
                    f"{window.end_time}: a window is [start_time, end_time)")
        check_labels(window.users, f"{at}.users", config, out)
        check_labels(window.accounts, f"{at}.accounts", config, out)
        check_id(window.name, f"{at}.name", config, out)
        if out.full:
            return


def _check_window_nodes(ids: Iterable[str], path: str, node_ids: Container[str],
                        config: ServerConfig, out: Violations) -> None:
    seen: set[str] = set()
    for k, node_id in enumerate(ids):
        if len(node_id) > config.max_id_chars:
            out.add(f"{path}[{k}]", f"{len(node_id)} characters exceed the limit of "
                    f"{config.max_id_chars} (max_id_chars)")
        elif node_id not in node_ids:
            out.add(f"{path}[{k}]", f"unknown node {shown(node_id)}")
        elif node_id in seen:
            out.add(f"{path}[{k}]", f"duplicate node id {shown(node_id)}")
        seen.add(node_id)
        if out.full:
            return
    if not seen:
        out.add(path, "a window covers at least one node")
