"""What a request asks of its decision, once checked: the options a Dispatch, an OpenSession's
snapshot and an UpdateSession carry alike.

The dispatcher and the predictor are asked for by an enum value, by name, or both, under the
contract's rule (`DispatchRequest.dispatcher_name`): a name decides when the value is unset,
both must agree when both are set, and a name nothing registered is refused naming its field
(`choose`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hpcdispatch.catalog import registered_dispatchers, registered_predictors
from hpcdispatch.registrations import Registrations
from hpcdispatch.v1 import dispatcher_pb2 as pb

from ..domain.caller_scope import CallerScope
from ..domain.search_control import SearchControl
from ..domain.search_settings import SearchSettings
from .shown import shown

OptionsRequest = pb.DispatchRequest | pb.UpdateSessionRequest


@dataclass(frozen=True, slots=True)
class Choice:
    """The kind a request asks for (0: the server's default), or the field at fault and why."""

    kind: int
    field: str = ""  # "" when the choice is valid
    why: str = ""


def choose(value: int, name: str, enum: Any, names: Registrations, what: str) -> Choice:
    """The kind that the enum field `what` (its `value`) and the field `what`_name (`name`) ask
    for together, by the contract's rule."""
    if value not in enum.values():
        return Choice(0, what, f"unknown {what} value {value}")
    if not name:
        return Choice(value)
    entry = names.by_name(name)
    if entry is None:
        return Choice(0, f"{what}_name", f"unknown {what} {shown(name)}; this server offers "
                      f"{', '.join(names.names)}")
    if value and value != entry.kind:
        return Choice(0, f"{what}_name", f"{shown(name)} is not {enum.Name(value)}, which "
                      f"`{what}` asks for: set one of the two, or both to the same {what}")
    return Choice(entry.kind)


def asked_dispatcher(request: OptionsRequest) -> Choice:
    return choose(request.dispatcher, request.dispatcher_name, pb.Dispatcher,
                  registered_dispatchers(), "dispatcher")


def asked_predictor(request: OptionsRequest) -> Choice:
    return choose(request.predictor, request.predictor_name, pb.Predictor,
                  registered_predictors(), "predictor")


@dataclass(frozen=True, slots=True)
class DecisionOptions:
    dispatcher: int  # kind (hpcdispatch.registrations); 0: the server's default
    predictor: int  # kind (hpcdispatch.registrations); 0: the server's default
    first_fit: bool  # pb.ALLOCATOR_FIRST_FIT asked for
    settings: SearchSettings  # the search options over their profile's defaults
    cluster: str  # "default" when the request names none

    @staticmethod
    def of(
        request: OptionsRequest, settings: SearchSettings, cluster: str,
    ) -> DecisionOptions:
        """`request`'s options (checked), with the settings its search options resolve to."""
        return DecisionOptions(
            dispatcher=asked_dispatcher(request).kind, predictor=asked_predictor(request).kind,
            first_fit=request.allocator == pb.ALLOCATOR_FIRST_FIT, settings=settings,
            cluster=cluster or "default",
        )

    def control(
        self, deadline: float, workers: int, cancelled: Callable[[], bool], identity: str = "",
    ) -> SearchControl:
        """The search these options ask for, with `workers` solver threads, until `deadline`
        (time.monotonic()) or until `cancelled()`, for the caller `identity` (authenticated by
        the edge; "" without one) on this request's cluster."""
        return SearchControl(settings=self.settings, deadline=deadline, first_fit=self.first_fit,
                             workers=workers, cancelled=cancelled,
                             scope=CallerScope(identity, self.cluster))
