"""The core's domain types on the wire and back, in one place.

The dispatchers, the predictors and the domain model speak their own types (`domain.outcome_kinds`,
`domain.search_settings.SearchRequest`); the rooms above the pipeline meet the wire's messages.
What crosses between the two is converted here, by name: the decision's status, each attempt's
status and end, each skipped job's reason and each moved promise's reason (answers), and the
search a request asks for (requests). A change of the .proto touches this module and the edge,
never the core; a domain value without its wire name fails at import.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any, TypeVar

from hpcdispatch.v1 import dispatcher_pb2 as pb

from .domain.outcome_kinds import AttemptEnd, PromiseMove, SkipReason, SolveStatus
from .domain.search_settings import SearchRequest

E = TypeVar("E", bound=IntEnum)


def _by_name(domain: type[E], wire: Any, prefix: str) -> dict[E, int]:
    """{domain value: the wire's value of the same name} (`prefix` + its name)."""
    return {member: wire.Value(prefix + member.name) for member in domain}


_SOLVE_STATUS = _by_name(SolveStatus, pb.SolveStatus, "SOLVE_STATUS_")
_ATTEMPT_END = _by_name(AttemptEnd, pb.AttemptEnd, "ATTEMPT_END_")
_SKIP_REASON = _by_name(SkipReason, pb.SkipReason, "SKIP_REASON_")
_PROMISE_MOVE = _by_name(PromiseMove, pb.PromiseMoveReason, "PROMISE_MOVE_REASON_")


def solve_status_to_pb(status: int) -> pb.SolveStatus.ValueType:
    """The wire's SolveStatus of a decision's or an attempt's status."""
    return pb.SolveStatus.ValueType(_SOLVE_STATUS[SolveStatus(status)])


def attempt_end_to_pb(ended_by: int) -> pb.AttemptEnd.ValueType:
    """The wire's AttemptEnd of why an attempt ended."""
    return pb.AttemptEnd.ValueType(_ATTEMPT_END[AttemptEnd(ended_by)])


def skip_reason_to_pb(reason: int) -> pb.SkipReason.ValueType:
    """The wire's SkipReason of why a queued job did not start."""
    return pb.SkipReason.ValueType(_SKIP_REASON[SkipReason(reason)])


def promise_move_to_pb(reason: int) -> pb.PromiseMoveReason.ValueType:
    """The wire's PromiseMoveReason of why a promise moved later."""
    return pb.PromiseMoveReason.ValueType(_PROMISE_MOVE[PromiseMove(reason)])


def search_request_from_pb(search: pb.SearchParameters) -> SearchRequest:
    """The profile a request names and the settings it sets (the fields present in the
    message, by name; SearchParameters' fields are SearchSettings' names)."""
    return SearchRequest(
        profile=search.profile,
        overrides={field.name: value for field, value in search.ListFields()
                   if field.name != "profile"},
    )
