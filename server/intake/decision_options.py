"""What a request asks of its decision, checked (limits and validity together) and resolved: the
options a Dispatch, an OpenSession's snapshot and an UpdateSession carry alike.

The dispatcher and the predictor are asked for by an enum value, by name, or both, under the
contract's rule (`DispatchRequest.dispatcher_name`): a name decides when the value is unset,
both must agree when both are set, and a name nothing registered is refused naming its field
(`choose`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hpcdispatch.catalog import predictor_name, registered_dispatchers, registered_predictors
from hpcdispatch.registrations import Registrations
from hpcdispatch.v1 import dispatcher_pb2 as pb

from ..config import ServerConfig
from ..core_wire import search_request_from_pb
from ..domain.caller_scope import CallerScope
from ..domain.profiles import PROFILES, resolve_settings, retired_profile
from ..domain.search_control import SearchControl
from ..domain.search_settings import SearchSettings
from .fields import check_id
from .shown import shown
from .violations import Violations

OptionsRequest = pb.DispatchRequest | pb.UpdateSessionRequest

# The values each enum the options read defines (EnumTypeWrapper.values() builds a list per
# call, and every request asks several times).
_VALUES: dict[str, frozenset[int]] = {}
# Settings resolved per (the request's SearchParameters bytes, default profile), with the
# profile's base settings they were resolved over (see `_resolved`).
_RESOLVED: dict[tuple[bytes, str], tuple[SearchSettings, SearchSettings]] = {}
_RESOLVED_KEPT = 256


def _values(enum: Any) -> frozenset[int]:
    values = _VALUES.get(enum.DESCRIPTOR.full_name)
    if values is None:
        values = _VALUES[enum.DESCRIPTOR.full_name] = frozenset(enum.values())
    return values


@dataclass(frozen=True, slots=True)
class Choice:
    """The kind a request asks for (0: the server's default), or the field at fault and why."""

    kind: int
    field: str = ""  # "" when the choice is valid
    why: str = ""


def choose(value: int, name: str, enum: Any, names: Registrations, what: str) -> Choice:
    """The kind that the enum field `what` (its `value`) and the field `what`_name (`name`) ask
    for together, by the contract's rule."""
    if value not in _values(enum):
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


def check_option_limits(request: OptionsRequest, config: ServerConfig, out: Violations) -> None:
    """The names a snapshot or a delta asks for (profile, dispatcher, predictor) within
    `max_id_chars`: checked with the sizes, before anything else."""
    check_id(request.search.profile, "search.profile", config, out)
    check_id(request.dispatcher_name, "dispatcher_name", config, out)
    check_id(request.predictor_name, "predictor_name", config, out)


def check_options(
    request: OptionsRequest, predictors: list[int], default_profile: str, out: Violations,
) -> SearchSettings | None:
    """The decision options of a snapshot or a session delta (dispatcher, predictor, allocator,
    search); returns the search settings they resolve to (None for an unknown profile)."""
    dispatcher, predictor = asked_dispatcher(request), asked_predictor(request)
    if dispatcher.field:
        out.add(dispatcher.field, dispatcher.why)
    if predictor.field:
        out.add(predictor.field, predictor.why)
    elif predictor.kind and predictor.kind not in predictors:
        out.add("predictor_name" if request.predictor_name else "predictor",
                f"predictor {predictor_name(predictor.kind)!r} is not available on this server")
    if request.allocator not in _values(pb.Allocator):
        out.add("allocator", f"unknown allocator value {request.allocator}")
    search = request.search
    if search.profile and search.profile not in PROFILES:
        retired = retired_profile(search.profile)
        out.add("search.profile", f"{retired}; the profiles: {sorted(PROFILES)}" if retired
                else f"unknown profile {shown(search.profile)}; one of {sorted(PROFILES)}")
    for name in ("delta_ms", "delta_max_ms", "k", "window", "reservation_depth",
                 "lookahead_depth", "easy_head_depth"):
        if search.HasField(name) and getattr(search, name) < 1:
            out.add(f"search.{name}", "must be >= 1")
    if search.HasField("stall_ms") and search.stall_ms < 0:
        out.add("search.stall_ms", "must be >= 0")
    if search.HasField("starvation_wait_s") and search.starvation_wait_s < 0:
        out.add("search.starvation_wait_s", "must be >= 0")
    if search.HasField("promise_after_s") and search.promise_after_s < -1:
        out.add("search.promise_after_s", "must be >= -1 (-1: no promises)")
    if search.profile and search.profile not in PROFILES:
        return None
    # δ <= δmax once the profile's defaults fill what the request leaves unset.
    resolved = _resolved(search, default_profile)
    if resolved.delta_max_ms < resolved.delta_ms:
        out.add("search.delta_max_ms", f"δmax {resolved.delta_max_ms} ms is below "
                f"δ {resolved.delta_ms} ms")
    if resolved.promise_after_s >= 0 and resolved.easy_head and resolved.easy_head_depth > 1:
        # The book's oldest job already holds a promise; EASY-k's later reservations are
        # made around EASY's head reservation, which the book does not make.
        out.add("search.easy_head_depth" if search.HasField("easy_head_depth")
                else "search.easy_head",
                f"easy_head_depth {resolved.easy_head_depth} > 1 with promises "
                f"(promise_after_s {resolved.promise_after_s} >= 0): the promise book holds "
                "the oldest jobs' starts itself; use easy_head_depth 1 or promise_after_s -1")
    return resolved


def _resolved(search: pb.SearchParameters, default_profile: str) -> SearchSettings:
    """`resolve_settings` of `search` over `default_profile`, made once per distinct request
    (a session's deltas repeat their options): kept while its profile's base settings are the
    ones it was resolved over (SearchSettings is frozen)."""
    key = (search.SerializeToString(deterministic=True), default_profile)
    base = PROFILES[search.profile or default_profile][0]
    kept = _RESOLVED.get(key)
    if kept is not None and kept[0] is base:
        return kept[1]
    resolved = resolve_settings(search_request_from_pb(search), default_profile)
    if len(_RESOLVED) >= _RESOLVED_KEPT:
        _RESOLVED.clear()
    _RESOLVED[key] = (base, resolved)
    return resolved


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
