"""The service's cache of node lists: a table per distinct list, rebuilt when anything changes."""

from __future__ import annotations

import pytest

from hpcdispatch.server.intake import node_table
from hpcdispatch.server.intake.node_table import (
    ALIASES_PER_TABLE,
    NodeTables,
    build_node_table,
    fast_node_list_digest,
)
from hpcdispatch.v1 import dispatcher_pb2 as pb


def _request(nodes: int, t: int = 100) -> pb.DispatchRequest:
    request = pb.DispatchRequest(time=t)
    for i in range(nodes):
        request.nodes.add(id=f"n{i}", state=pb.NODE_STATE_UP, capacity={"core": 8, "mem": 64})
    return request


def test_the_same_node_list_is_built_once() -> None:
    tables = NodeTables(size=2)
    first = tables.get(_request(5))
    other_jobs = _request(5, t=200)
    other_jobs.queued_jobs.add(id="q", submit_time=150, units=1, unit_request={"core": 1},
                               requested_time=10)
    assert tables.get(other_jobs) is first  # jobs and time are not part of the key
    assert (tables.hits, tables.misses) == (1, 1)


def test_any_node_change_is_a_new_table_and_old_ones_are_evicted() -> None:
    tables = NodeTables(size=2)
    base = tables.get(_request(5))
    changed = _request(5)
    changed.nodes[3].capacity["mem"] = 32
    assert tables.get(changed) is not base
    index = tables.get(changed).index
    assert index is not None
    assert index.capacity[3] == (8, 32)  # (core, mem)
    tables.get(_request(6))  # a third list evicts the least recently used (base)
    assert tables.get(_request(5)) is not base
    assert tables.misses == 4


def test_map_order_does_not_matter_and_invalid_lists_carry_their_violations() -> None:
    a, b = pb.DispatchRequest(), pb.DispatchRequest()
    a.nodes.add(id="n0", capacity={"core": 8, "mem": 64})
    b.nodes.add(id="n0", capacity={"mem": 64, "core": 8})
    tables = NodeTables()
    assert tables.get(a) is tables.get(b)
    bad = pb.DispatchRequest()
    bad.nodes.add(id="n0", state=pb.NODE_STATE_UP, capacity={"core": -1})
    table = build_node_table(bad)
    assert table.nodes is None and table.index is None
    assert [v.field for v in table.check.violations] == ['nodes[0].capacity["core"]']


def test_a_list_whose_fast_bytes_change_is_found_by_its_sorted_digest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # upb writes a map in its hash table's order; a sender may write another order each time.
    # Simulated: every request's fast digest differs, its deterministic digest does not.
    sent = iter(range(1000))
    monkeypatch.setattr(node_table, "fast_node_list_digest",
                        lambda request, parts=None: b"f%d" % next(sent))
    tables = NodeTables(size=1)
    first = tables.get(_request(3))
    for _ in range(20):
        assert tables.get(_request(3)) is first
    assert (tables.hits, tables.misses) == (20, 1)
    assert len(tables._aliases) <= ALIASES_PER_TABLE * tables.size  # bounded
    other = tables.get(_request(4))
    assert other is not first and len(tables._tables) == 1
    assert set(tables._aliases.values()) == {node_table.node_list_digest(_request(4))}


def test_the_fast_digest_names_one_list() -> None:
    a, b = _request(3), _request(3)
    assert fast_node_list_digest(a) == fast_node_list_digest(b)
    b.nodes[2].capacity["mem"] = 65
    assert fast_node_list_digest(a) != fast_node_list_digest(b)
    b.nodes[2].capacity["mem"] = 64
    b.nodes[2].state = pb.NODE_STATE_DOWN
    assert fast_node_list_digest(a) != fast_node_list_digest(b)


def test_the_table_holds_the_capacity_matrix_of_the_valid_nodes() -> None:
    request = _request(3)
    request.nodes[1].capacity["gpu"] = 2
    capacity = build_node_table(request).capacity
    assert capacity is not None
    assert capacity.position == {"n0": 0, "n1": 1, "n2": 2}
    assert capacity.resource_index == {"core": 0, "gpu": 1, "mem": 2}
    assert capacity.matrix.tolist() == [[8, 0, 64, 0], [8, 2, 64, 0], [8, 0, 64, 0]]


def _same_table(a: node_table.NodeTable, b: node_table.NodeTable) -> None:
    assert (a.check, a.nodes, a.index) == (b.check, b.nodes, b.index)
    assert a.capacity is not None and b.capacity is not None
    assert (a.capacity.position, a.capacity.resource_index) == (
        b.capacity.position, b.capacity.resource_index)
    assert a.capacity.matrix.tolist() == b.capacity.matrix.tolist()


def test_a_changed_list_reuses_the_unchanged_nodes_of_the_last_table() -> None:
    tables = NodeTables()
    first = tables.get(_request(6))
    changed = _request(6)
    changed.nodes[2].state = pb.NODE_STATE_DOWN
    changed.nodes.add(id="n6", state=pb.NODE_STATE_UP, capacity={"core": 8, "gpu": 1})
    table = tables.get(changed)
    _same_table(table, build_node_table(changed))  # as if built from scratch
    assert first.nodes is not None and table.nodes is not None
    assert table.nodes[0] is first.nodes[0] and table.nodes[2] is not first.nodes[2]


@pytest.mark.parametrize("case", ["duplicate id", "empty id", "bad state", "no capacity",
                                  "zero amount", "empty type", "no nodes"])
def test_a_changed_list_with_a_bad_node_has_check_nodes_violations(case: str) -> None:
    tables = NodeTables()
    tables.get(_request(4))
    bad = _request(4)
    node = bad.nodes[3]
    if case == "duplicate id":
        node.id = "n1"  # n1 itself is reused unchanged
    elif case == "empty id":
        node.id = ""
    elif case == "bad state":
        node.state = pb.NODE_STATE_UNSPECIFIED
    elif case == "no capacity":
        node.ClearField("capacity")
    elif case == "zero amount":
        node.capacity["core"] = 0
    elif case == "empty type":
        node.capacity[""] = 1
    else:
        bad.ClearField("nodes")
    table = tables.get(bad)
    assert table.nodes is None and table.check.violations
    assert table.check == build_node_table(bad).check
