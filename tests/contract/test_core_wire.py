"""The core's domain types and the wire's enums and messages meet in one place
(server/core_wire.py, issue #44): every value converts to the wire's value of the same name,
the wire says nothing the core cannot, and a request's search reaches the settings by name."""

from __future__ import annotations

from enum import IntEnum
from typing import Any

import pytest

from hpcdispatch.server import core_wire
from hpcdispatch.server.domain.outcome_kinds import AttemptEnd, PromiseMove, SkipReason, SolveStatus
from hpcdispatch.server.domain.profiles import PROFILES, resolve_settings
from hpcdispatch.server.domain.search_settings import SearchRequest
from hpcdispatch.v1 import dispatcher_pb2 as pb

ENUMS = [
    (SolveStatus, pb.SolveStatus, "SOLVE_STATUS_", core_wire.solve_status_to_pb),
    (AttemptEnd, pb.AttemptEnd, "ATTEMPT_END_", core_wire.attempt_end_to_pb),
    (SkipReason, pb.SkipReason, "SKIP_REASON_", core_wire.skip_reason_to_pb),
    (PromiseMove, pb.PromiseMoveReason, "PROMISE_MOVE_REASON_", core_wire.promise_move_to_pb),
]


@pytest.mark.parametrize(("domain", "wire", "prefix", "to_pb"), ENUMS)
def test_every_domain_value_is_the_wire_value_of_its_name(
        domain: type[IntEnum], wire: Any, prefix: str, to_pb: Any) -> None:
    for member in domain:
        assert wire.Name(to_pb(member)) == prefix + member.name
        assert to_pb(int(member)) == to_pb(member)  # a plugin's plain number reads the same


@pytest.mark.parametrize(("domain", "wire", "prefix", "to_pb"), ENUMS)
def test_the_wire_says_nothing_the_core_cannot(
        domain: type[IntEnum], wire: Any, prefix: str, to_pb: Any) -> None:
    """A value added to the .proto needs its domain value (UNSPECIFIED: the wire's default)."""
    said = {name.removeprefix(prefix) for name, _ in wire.items()}
    assert said - {"UNSPECIFIED"} <= {member.name for member in domain}


def test_a_value_outside_the_domain_is_refused() -> None:
    with pytest.raises(ValueError):
        core_wire.solve_status_to_pb(99)
    with pytest.raises(ValueError):
        core_wire.skip_reason_to_pb(0)  # the wire's UNSPECIFIED is no reason
    with pytest.raises(ValueError):
        core_wire.promise_move_to_pb(99)


def test_a_search_request_carries_the_fields_the_request_sets() -> None:
    search = pb.SearchParameters(profile="papers", k=3, deterministic=False, window=7)
    request = core_wire.search_request_from_pb(search)
    # An explicit false is an override too: it replaces a profile's true.
    assert request == SearchRequest("papers", {"k": 3, "window": 7, "deterministic": False})
    settings = resolve_settings(request, "qos")
    assert (settings.profile, settings.k, settings.window) == ("papers", 3, 7)
    assert core_wire.search_request_from_pb(pb.SearchParameters()) == SearchRequest()
    assert resolve_settings(SearchRequest(), "qos") == PROFILES["qos"][0]
