"""A snapshot's node list, validated, converted and indexed once per distinct list.

A workload manager sends the same nodes snapshot after snapshot: states and capacities change
far less often than jobs. Checking, converting and indexing the list in Python costs about
10 ms per request for LLNL-Atlas' 1,152 nodes and seconds for 100,000 nodes; a digest of the
list's serialized bytes (protobuf's C code) costs a fraction of that. The service keeps the
tables of the last few distinct lists, keyed by that digest, so a repeated list is only hashed.

Two digests name a list: the fast one hashes each node's bytes as protobuf writes them (a
capacity map in whatever order it holds its entries: the same order for the same sender, but
not necessarily for two senders), the other the deterministic bytes (map entries sorted by key).
A list is looked up by its fast digest first; when that misses, its deterministic digest finds
the same list sent with its maps in another order, and the fast digest becomes a second key of
that table. Equal digests are equal bytes (blake2b, 128 bits), so either key names one list.

A new list (a node went down, one was added) is usually the last one with a few nodes changed:
the last table built keeps its nodes by their bytes, and a new table reuses every node whose
bytes are identical (checked and converted already); only the others are checked on their own,
and the ids of all for duplicates. Should anything be wrong, the list is checked from scratch
by `check_nodes`, which names every violation.
"""

from __future__ import annotations

import hashlib
import operator
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import cast

import numpy as np

from hpcdispatch.proto_convert import nodes_from_pb
from hpcdispatch.snapshot import Node
from hpcdispatch.v1 import dispatcher_pb2 as pb

from ..config import ServerConfig
from ..domain.node_index import NodeIndex, index_nodes
from .fields import DEFAULT_LIMITS, MAX_AMOUNT, labels_within, types_within
from .interruption import NEVER, Interruption
from .nodes import NodeCheck, check_nodes

ALIASES_PER_TABLE = 4
_DETERMINISTIC = operator.methodcaller("SerializeToString", deterministic=True)


@dataclass(frozen=True, slots=True)
class NodeCapacity:
    """The valid nodes' capacities as one int64 matrix, for whole-snapshot checks in numpy.

    Row `position[node_id]`, column `resource_index[type]`; a type the node lacks is 0 (a
    node's own capacities are > 0), and the last column, of a type no node has, is all 0.
    """

    position: dict[str, int]
    resource_index: dict[str, int]
    matrix: np.ndarray  # (nodes, len(resource_index) + 1), int64

    @staticmethod
    def of(capacity: dict[str, dict[str, int]],
           interruption: Interruption = NEVER) -> NodeCapacity:
        """The matrix of checked capacities (their resource types within the limit: the
        matrix has a column per type)."""
        types = sorted({r for cap in capacity.values() for r in cap})
        resource_index = {r: i for i, r in enumerate(types)}
        matrix = np.zeros((len(capacity), len(types) + 1), dtype=np.int64)
        for row, cap in enumerate(capacity.values()):
            interruption.tick()
            for resource, amount in cap.items():
                matrix[row, resource_index[resource]] = amount
        return NodeCapacity({n: i for i, n in enumerate(capacity)}, resource_index, matrix)


@dataclass(frozen=True, slots=True)
class NodeTable:
    check: NodeCheck  # the list's own violations (none: the fields below are set)
    nodes: tuple[Node, ...] | None  # the Snapshot's nodes
    index: NodeIndex | None  # the Problem's view of them
    capacity: NodeCapacity | None = None  # the validation's view of them


def _digest(parts: list[bytes]) -> bytes:
    return hashlib.blake2b(b"".join(parts), digest_size=16).digest()


def node_bytes(request: pb.DispatchRequest) -> list[bytes]:
    """Each node's bytes as written without sorting map entries."""
    return list(map(pb.Node.SerializeToString, request.nodes))


def node_list_digest(request: pb.DispatchRequest) -> bytes:
    """The digest of the node list's deterministic bytes (map entries in key order)."""
    return b"d" + _digest(list(map(_DETERMINISTIC, request.nodes)))


def fast_node_list_digest(request: pb.DispatchRequest, parts: list[bytes] | None = None) -> bytes:
    """The digest of the node list's bytes as written without sorting map entries (`parts`:
    `node_bytes(request)` when the caller has them)."""
    return b"f" + _digest(node_bytes(request) if parts is None else parts)


def build_node_table(
    request: pb.DispatchRequest, parts: list[bytes] | None = None,
    known: Mapping[bytes, Node] | None = None, config: ServerConfig = DEFAULT_LIMITS,
    interruption: Interruption = NEVER,
) -> NodeTable:
    """Check, convert and index the node list, within `config`'s limits (ids, resource types:
    a list beyond them is not converted). With `known` (valid nodes by their bytes, e.g. of
    the previous table, checked under the same limits) and `parts` (`node_bytes(request)`), a
    node whose bytes are known is taken as it is; the rest are checked on their own and the
    ids checked for duplicates. Whenever anything is wrong, `check_nodes` says what, as
    without them. `interruption` stops it between chunks of nodes."""
    nodes = None
    if parts is not None and known is not None:
        nodes = _nodes_reusing(request, parts, known, config, interruption)
    if nodes is None:
        check = check_nodes(request, config, interruption)
        if check.violations:
            return NodeTable(check, None, None)
        interruption.check()
        nodes = nodes_from_pb(request)
    else:
        check = NodeCheck({n.id: dict(n.capacity) for n in nodes}, ())
    interruption.check()
    index = index_nodes(nodes)
    interruption.check()
    return NodeTable(check, nodes, index, NodeCapacity.of(check.capacity, interruption))


_STATES = {pb.NODE_STATE_UP, pb.NODE_STATE_DOWN, pb.NODE_STATE_DRAINED}


def _nodes_reusing(
    request: pb.DispatchRequest, parts: list[bytes], known: Mapping[bytes, Node],
    config: ServerConfig, interruption: Interruption,
) -> tuple[Node, ...] | None:
    """The nodes, each known one reused, or None when any node or the list is invalid."""
    found = list(map(known.get, parts))
    if None in found:
        for i, node in enumerate(found):
            if node is None:
                interruption.tick()
                node = _valid_node(request.nodes[i], config)
                if node is None:
                    return None
                found[i] = node
        types: set[str] = set()
        for node in cast(list[Node], found):  # a new node may name a new resource type
            types.update(node.capacity)
        if len(types) > config.max_resource_types:
            return None
    nodes = cast(list[Node], found)
    if not nodes or len({n.id for n in nodes}) != len(nodes):
        return None
    return tuple(nodes)


def _valid_node(msg: pb.Node, config: ServerConfig) -> Node | None:
    """The node converted when it passes check_nodes' checks of one node; else None."""
    if len(msg.id) > config.max_id_chars or not types_within(msg.capacity, config):
        return None
    if not (labels_within(msg.partitions, config) and labels_within(msg.features, config)):
        return None
    cap = dict(msg.capacity)
    if not msg.id or msg.state not in _STATES or not cap:
        return None
    if "" in cap or min(cap.values()) <= 0 or max(cap.values()) > MAX_AMOUNT:
        return None
    return nodes_from_pb(pb.DispatchRequest(nodes=[msg]))[0]


class NodeTables:
    """The tables of the `size` most recently seen node lists (thread-safe)."""

    def __init__(self, size: int = 4, config: ServerConfig = DEFAULT_LIMITS) -> None:
        self.size = size
        self.config = config  # the limits every table is checked under
        # Tables by deterministic digest, least recently used first; the fast digests they were
        # found by point at them (at most ALIASES_PER_TABLE per table on average, oldest
        # dropped first: a sender whose map order varies costs a deterministic digest).
        self._tables: OrderedDict[bytes, NodeTable] = OrderedDict()
        self._aliases: dict[bytes, bytes] = {}  # fast digest -> deterministic digest
        self._lock = threading.Lock()
        self._known: dict[bytes, Node] = {}  # the last valid table built: its nodes by bytes
        self.hits = self.misses = 0

    def get(
        self, request: pb.DispatchRequest, interruption: Interruption = NEVER
    ) -> NodeTable:
        parts = node_bytes(request)
        fast = fast_node_list_digest(request, parts)
        with self._lock:
            table = self._use(self._aliases.get(fast))
            if table is not None:
                return table
        key = node_list_digest(request)
        with self._lock:
            table = self._use(key)
            if table is not None:
                self._alias(fast, key)
                return table
            self.misses += 1
            known = self._known
        # Outside the lock: other requests go on meanwhile. A list that changed in a few nodes
        # reuses the other nodes of the last table built.
        table = build_node_table(request, parts, known, self.config, interruption)
        with self._lock:
            if table.nodes is not None:
                self._known = dict(zip(parts, table.nodes, strict=True))
            self._tables[key] = table
            self._tables.move_to_end(key)
            while len(self._tables) > self.size:
                self._tables.popitem(last=False)
            live = self._tables.keys()
            for alias in [a for a, k in self._aliases.items() if k not in live]:
                del self._aliases[alias]
            self._alias(fast, key)
        return table

    def _alias(self, fast: bytes, key: bytes) -> None:
        """Let fast digest `fast` name the table under `key` (lock held)."""
        self._aliases.pop(fast, None)
        self._aliases[fast] = key  # newest last
        while len(self._aliases) > ALIASES_PER_TABLE * self.size:
            del self._aliases[next(iter(self._aliases))]

    def _use(self, key: bytes | None) -> NodeTable | None:
        """The table under deterministic digest `key`, marked recently used (lock held)."""
        if key is None:
            return None
        table = self._tables.get(key)
        if table is not None:
            self._tables.move_to_end(key)
            self.hits += 1
        return table
