"""The rules of the node list, limits and validity together: a snapshot's nodes, a session
delta's node changes, and the nodes a session holds once a delta applies.

Limits first: ids and capacities within `max_id_chars` and `max_resource_types`, at most
`max_nodes` nodes, and the types all nodes name together within `max_resource_types`; a node
list beyond them is not converted. Then each node: a unique non-empty id, a known state, and a
capacity naming at least one resource type with every amount in (0, 2^40].
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from hpcdispatch.v1 import dispatcher_pb2 as pb

from ..config import ServerConfig
from .fields import DEFAULT_LIMITS, MAX_AMOUNT, check_capacity_amounts, check_id, check_types
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
