"""What the server offers by name: the plugins it loads at start (logged, shown in the metrics),
and the dispatchers, predictors and profiles DescribeService lists.

At start the server imports every plugin's code (the built-ins stay lazy: their imports are
the project's own and tested), so that a plugin that fails to load is reported at once, by
name, rather than at the first request naming it; such a plugin stays registered (a request
naming it is answered by the fallback, saying why) and DescribeService lists it under
`unavailable` instead of the names it offers.
"""

from __future__ import annotations

import dataclasses

import structlog

from hpcdispatch import __version__
from hpcdispatch.catalog import enum_value
from hpcdispatch.registrations import Registrations
from hpcdispatch.v1 import dispatcher_pb2 as pb

from ..domain.profiles import DEFAULT_PROFILE, PROFILES
from ..domain.search_settings import SearchSettings
from ..intake.shown import clipped
from ..pipeline import (
    Predictors,
    dispatcher_registrations,
    load_dispatcher_plugins,
    unavailable_dispatchers,
)
from .decision_front import DecisionFront, dispatcher_name, predictor_name
from .metrics import ServiceMetrics

log = structlog.get_logger("hpcdispatch.server")

REASON_CHARS = 1024  # an unavailable plugin's error, as DescribeService echoes it
# The knobs SearchProfile also carries as flat fields of their own, kept for clients older than
# `SearchProfile.settings` and not extended: every SearchProfile field but its name, description
# and settings is the SearchSettings field of that name (tests/contract/test_search_fields.py).
PROFILE_FIELDS = tuple(f.name for f in pb.SearchProfile.DESCRIPTOR.fields
                       if f.name not in ("name", "description", "settings"))


def profile_message(settings: SearchSettings, description: str) -> pb.SearchProfile:
    """A profile as DescribeService shows it: every SearchSettings field in `settings` (the
    SearchParameters field of its name, `profile` included), and the flat fields of old."""
    every = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)}
    return pb.SearchProfile(name=settings.profile, description=description,
                            settings=pb.SearchParameters(**every),
                            **{name: every[name] for name in PROFILE_FIELDS})


def _plugins(registrations: Registrations) -> list[str]:
    return [e.name for e in registrations.entries if not e.built_in]


def load_plugins(predictors: Predictors, metrics: ServiceMetrics) -> None:
    """Import every plugin's code now; log what is offered, what failed and what was ignored,
    and show each plugin's state in `hpcdispatch_plugin_loaded`."""
    groups = (
        ("dispatcher", dispatcher_registrations(), load_dispatcher_plugins()),
        ("predictor", predictors.registrations, predictors.load_plugins()),
    )
    for group, registrations, failed in groups:
        plugins = _plugins(registrations)
        metrics.show_plugins(group, [n for n in plugins if n not in failed], failed)
        if plugins:
            log.info("plugins registered", group=group, names=plugins,
                     unavailable=sorted(failed) or None)
        for name, why in registrations.ignored:
            log.warning("registration ignored", group=group, name=name, why=why)


def describe(front: DecisionFront) -> pb.DescribeServiceResponse:
    """DescribeService's answer."""
    config = front.config
    dispatchers = dispatcher_registrations().entries
    predictors = front.predictors.registrations.entries
    failed = {"dispatcher": unavailable_dispatchers(),
              "predictor": front.predictors.unavailable()}
    offered_d = [e for e in dispatchers if e.name not in failed["dispatcher"]]
    offered_p = [e for e in predictors if e.name not in failed["predictor"]]
    return pb.DescribeServiceResponse(
        version=__version__,
        default_dispatcher=pb.Dispatcher.ValueType(
            enum_value(front.default_dispatcher, pb.Dispatcher)),
        default_predictor=pb.Predictor.ValueType(
            enum_value(front.default_predictor, pb.Predictor)),
        default_dispatcher_name=dispatcher_name(front.default_dispatcher),
        default_predictor_name=predictor_name(front.default_predictor),
        default_profile=config.default_profile or DEFAULT_PROFILE,
        profiles=[profile_message(s, text) for s, text in PROFILES.values()],
        dispatchers=[pb.Dispatcher.ValueType(e.kind) for e in offered_d
                     if enum_value(e.kind, pb.Dispatcher)],
        predictors=[pb.Predictor.ValueType(e.kind) for e in offered_p
                    if enum_value(e.kind, pb.Predictor)],
        dispatcher_names=[e.name for e in offered_d],
        predictor_names=[e.name for e in offered_p],
        unavailable=[pb.UnavailablePlugin(group=group, name=name,
                                          reason=clipped(why, REASON_CHARS))
                     for group, by_name in failed.items() for name, why in by_name.items()],
        max_nodes=config.max_nodes,
        max_jobs=config.max_jobs,
    )
