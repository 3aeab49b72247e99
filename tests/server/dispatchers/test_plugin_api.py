"""The plugin API speaks the server's own types (issue #44): what `dispatchers.api` and
`predictors.api` export, and what a plugin's outcome carries, are domain types, never the wire's
generated ones (docs/plugins.md)."""

from __future__ import annotations

import dataclasses
import typing
from types import ModuleType

import pytest

from hpcdispatch.server.dispatchers import api as dispatcher_api
from hpcdispatch.server.dispatchers.base import AttemptRecord
from hpcdispatch.server.domain import outcome_kinds
from hpcdispatch.server.predictors import api as predictor_api

WIRE = ("hpcdispatch.v1", "google.protobuf")


def _home(value: object) -> str:
    """The module a class, a function or (for any other value) its type is defined in."""
    defined = value if isinstance(value, type) or callable(value) else type(value)
    return getattr(defined, "__module__", "")


@pytest.mark.parametrize("api", [dispatcher_api, predictor_api])
def test_the_plugin_apis_export_nothing_of_the_wire(api: ModuleType) -> None:
    for name in api.__all__:
        home = _home(getattr(api, name))
        assert not home.startswith(WIRE), (name, home)


def test_an_outcome_is_classified_by_the_domain_enums() -> None:
    assert dispatcher_api.SolveStatus is outcome_kinds.SolveStatus
    assert dispatcher_api.SkipReason is outcome_kinds.SkipReason
    # The name plugins already use is the domain's value, not the wire's number.
    assert type(dispatcher_api.HEURISTIC) is outcome_kinds.SolveStatus
    hints = {f.name: typing.get_type_hints(dispatcher_api.Outcome)[f.name]
             for f in dataclasses.fields(dispatcher_api.Outcome)}
    assert hints["status"] is outcome_kinds.SolveStatus
    assert hints["skipped"] == list[tuple[int, outcome_kinds.SkipReason]]
    attempt = typing.get_type_hints(AttemptRecord)
    assert (attempt["status"], attempt["ended_by"]) == (
        outcome_kinds.SolveStatus, outcome_kinds.AttemptEnd)
