"""The independent check's self-test (issue #43): a valid answer, changed one way at a time as a
broken or hostile server could change it on the wire, is caught every time, and caught by the
rule meant for it alone. Dropping any rule of `decision_check.RULES` leaves its mutations
uncaught, so this test fails whichever rule is lost."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from hpcdispatch.decision_check import RULES, SnapshotFacts, check_decision, check_decision_against
from hpcdispatch.proto_convert import add_starts, decision_from_pb
from hpcdispatch.snapshot import NodeState, Snapshot, UnavailabilityWindow
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.instances import T, decide, node, queued, running

Mutation = Callable[[pb.DispatchResponse], None]


def snapshot() -> Snapshot:
    """One node with room (n1), one down, one drained, one full; a two-unit job needing the
    feature "ib" and a GPU job. Two more nodes with room: n5 without "ib", n6 with it but under
    maintenance from t on (issue #50's rules); n7 with "x", the node of a job needing "x" or
    "y" (an OR of features), and n8 in reservation R, the node of a job that must run in R."""
    with_ib = dataclasses.replace(node(1, cores=16, gpu=2), features=("ib",))
    return Snapshot(
        T,
        (with_ib, node(2, state=NodeState.DOWN, gpu=1),
         node(3, state=NodeState.DRAINED, gpu=1), node(4), node(5, cores=16),
         dataclasses.replace(node(6, cores=16), features=("ib",)),
         dataclasses.replace(node(7), features=("x",)), node(8)),
        (running("r", "n4", 4, 100),),
        (dataclasses.replace(queued("a", 2, 100, units=2), required_features=("ib",)),
         queued("b", 1, 50, gpu=1),
         dataclasses.replace(queued("c", 4, 100), feature_alternatives=(("x",), ("y",))),
         dataclasses.replace(queued("d", 4, 100), reservation="R")),
        (UnavailabilityWindow(("n6",), T, T + 1000),
         UnavailabilityWindow(("n8",), T - 10, T + 1000, name="R")),
    )


def valid_answer(snap: Snapshot) -> pb.DispatchResponse:
    """EASY's decision on `snap`, as the service answers it on the wire."""
    _, decision = decide("easy", snap)
    response = pb.DispatchResponse(time=decision.time)
    add_starts(response, decision.starts, {q.id: q.unit_request for q in snap.queued})
    assert {s.job_id: tuple(u.node_id for u in s.units) for s in response.starts
            if s.job_id in "cd"} == {"c": ("n7",), "d": ("n8",)}
    assert {s.job_id for s in response.starts} == {"a", "b", "c", "d"}
    return response


def start(response: pb.DispatchResponse, job_id: str) -> pb.JobStart:
    return next(s for s in response.starts if s.job_id == job_id)


def add_unit(response: pb.DispatchResponse) -> None:
    start(response, "a").units.add().CopyFrom(start(response, "a").units[0])


def set_node(job_id: str, node_id: str) -> Mutation:
    def mutate(response: pb.DispatchResponse) -> None:
        for unit in start(response, job_id).units:
            unit.node_id = node_id
    return mutate


def set_amount(job_id: str, resource: str, change: int) -> Mutation:
    def mutate(response: pb.DispatchResponse) -> None:
        start(response, job_id).units[0].amounts[resource] += change
    return mutate


def set_duration(job_id: str, seconds: int) -> Mutation:
    def mutate(response: pb.DispatchResponse) -> None:
        start(response, job_id).expected_duration = seconds
    return mutate


# (what is wrong, the rule that must catch it, the change to a valid answer)
MUTATIONS: list[tuple[str, str, Mutation]] = [
    ("another time echoed", "time", lambda r: setattr(r, "time", r.time + 1)),
    ("a job that is not queued", "queued", lambda r: setattr(r.starts[0], "job_id", "ghost")),
    ("a running job started", "queued", lambda r: setattr(r.starts[0], "job_id", "r")),
    ("a job started twice", "once", lambda r: r.starts.add().CopyFrom(start(r, "b"))),
    ("a unit missing", "units", lambda r: start(r, "a").units.pop()),
    ("a unit too many", "units", add_unit),
    ("a unit given more than its per-unit request", "amounts", set_amount("a", "core", 1)),
    ("a unit given less than its per-unit request", "amounts", set_amount("a", "core", -1)),
    ("a unit without one of its resource types", "amounts",
     lambda r: start(r, "b").units[0].amounts.pop("gpu")),
    ("a unit given a type it did not ask for", "amounts", set_amount("a", "gpu", 1)),
    ("an expected_duration of 0", "duration", set_duration("b", 0)),
    ("a negative expected_duration", "duration", set_duration("b", -30)),
    ("an expected_duration past the requested time", "duration", set_duration("b", 51)),
    ("a unit on an unknown node", "known_node", set_node("b", "n9")),
    ("a unit on a down node", "up_node", set_node("b", "n2")),
    ("a unit on a drained node", "up_node", set_node("b", "n3")),
    ("a node over capacity", "capacity", set_node("b", "n4")),
    ("a unit on a node without a required feature", "eligible", set_node("a", "n5")),
    ("a unit in a maintenance window", "window", set_node("a", "n6")),
    ("a unit on a node with no term of its feature alternatives", "eligible",
     set_node("c", "n5")),
    ("a unit of a reservation's job outside it", "window", set_node("d", "n5")),
]


def test_the_valid_answer_passes() -> None:
    snap = snapshot()
    assert check_decision(snap, decision_from_pb(valid_answer(snap))) == []


@pytest.mark.parametrize(("what", "rule", "mutate"), MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_every_mutation_is_caught_by_its_rule_alone(what: str, rule: str,
                                                     mutate: Mutation) -> None:
    snap = snapshot()
    response = valid_answer(snap)
    mutate(response)
    decision = decision_from_pb(response)
    assert check_decision(snap, decision), f"not caught: {what}"
    others = [r for r in RULES if r != rule]
    assert check_decision_against(SnapshotFacts(snap), decision, rules=others) == [], (
        f"{what}: caught by another rule than {rule!r}, so dropping {rule!r} would go unseen")
    assert check_decision_against(SnapshotFacts(snap), decision, rules=[rule])


def test_every_rule_has_a_mutation() -> None:
    """A rule without a mutation could be dropped unseen; a mutation's rule must exist."""
    assert sorted({rule for _, rule, _ in MUTATIONS}) == sorted(RULES)
