"""The service's cache of node lists: a table per distinct list, rebuilt when anything changes."""

from __future__ import annotations

from hpcdispatch.server.node_table import NodeTables, build_node_table
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
    assert tables.get(changed).index is not None
    assert tables.get(changed).index.capacity[3] == (8, 32)  # (core, mem)  # type: ignore[union-attr]
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
