"""A profile knob is one name: a SearchSettings field, the SearchParameters field a request sets
it with, and the SearchProfile field DescribeService shows it in (CONTRIBUTING.md)."""

from __future__ import annotations

import dataclasses

from hpcdispatch.client import DispatcherClient
from hpcdispatch.server.dispatchers.profiles import PROFILES
from hpcdispatch.server.dispatchers.search_settings import SearchSettings
from hpcdispatch.v1 import dispatcher_pb2 as pb

SETTINGS = {f.name for f in dataclasses.fields(SearchSettings)} - {"profile"}
# Per request only, never a profile's: reproducible search, EASY-k's and LOS's parameters.
REQUEST_ONLY = {"deterministic", "reservation_depth", "lookahead_depth"}


def _fields(message: type) -> set[str]:
    return {f.name for f in message.DESCRIPTOR.fields}  # type: ignore[attr-defined]


def test_every_setting_is_a_request_field_and_a_profile_field_of_its_name() -> None:
    assert _fields(pb.SearchParameters) - {"profile"} == SETTINGS
    assert _fields(pb.SearchProfile) - {"name", "description"} == SETTINGS - REQUEST_ONLY


def test_describe_service_shows_every_knob_of_every_profile(client: DispatcherClient) -> None:
    shown = {p.name: p for p in client.describe().profiles}
    assert set(shown) == set(PROFILES)
    for name, (settings, text) in PROFILES.items():
        assert shown[name].description == text
        for knob in SETTINGS - REQUEST_ONLY:
            assert getattr(shown[name], knob) == getattr(settings, knob), (name, knob)
