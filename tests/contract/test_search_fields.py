"""A profile knob is one name: a SearchSettings field and the SearchParameters field a request
sets it with; DescribeService shows every knob of a profile in `SearchProfile.settings`, a
SearchParameters filled from SearchSettings field by field (CONTRIBUTING.md). The flat
SearchProfile fields of old are kept, filled, and never extended."""

from __future__ import annotations

import dataclasses
import re

from hpcdispatch.client import DispatcherClient
from hpcdispatch.server.core_wire import search_request_from_pb
from hpcdispatch.server.domain.profiles import PROFILES, resolve_settings
from hpcdispatch.server.domain.search_settings import SearchSettings
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.paths import ROOT

SETTINGS = {f.name for f in dataclasses.fields(SearchSettings)} - {"profile"}
# SearchProfile's flat knobs, frozen: a new knob appears in `settings` only.
FLAT = {"delta_ms", "delta_max_ms", "k", "window", "stall_ms", "protect_head",
        "starvation_wait_s", "more_orders", "work_conserving", "easy_head", "easy_head_depth",
        "capacity_first", "promise_after_s"}


def _fields(message: type) -> set[str]:
    return {f.name for f in message.DESCRIPTOR.fields}  # type: ignore[attr-defined]


def test_every_setting_is_a_request_field_of_its_name() -> None:
    assert _fields(pb.SearchParameters) - {"profile"} == SETTINGS


def test_the_flat_profile_fields_are_frozen_and_settings_carries_every_knob() -> None:
    assert _fields(pb.SearchProfile) == FLAT | {"name", "description", "settings"}
    assert FLAT <= SETTINGS
    field = pb.SearchProfile.DESCRIPTOR.fields_by_name["settings"]
    assert field.message_type is pb.SearchParameters.DESCRIPTOR


def test_describe_service_shows_every_knob_of_every_profile(client: DispatcherClient) -> None:
    shown = {p.name: p for p in client.describe().profiles}
    assert set(shown) == set(PROFILES)
    for name, (settings, text) in PROFILES.items():
        profile = shown[name]
        assert profile.description == text
        assert profile.settings.profile == name
        for knob in SETTINGS:
            assert profile.settings.HasField(knob), (name, knob)
            assert getattr(profile.settings, knob) == getattr(settings, knob), (name, knob)
        for knob in FLAT:
            assert getattr(profile, knob) == getattr(settings, knob), (name, knob)
        # Sent back as a request's search, the settings ask for exactly the profile.
        assert resolve_settings(search_request_from_pb(profile.settings), "qos") == settings, name


def test_a_new_knob_shows_in_settings_without_a_profile_field() -> None:
    """A SearchSettings field the profile message never heard of still reaches `settings`:
    the fill is generic (here a field that exists in SearchParameters but not flat)."""
    from hpcdispatch.server.rpc.offered import profile_message

    settings = dataclasses.replace(PROFILES["qos"][0], lookahead_depth=7)
    shown = profile_message(settings, "text")
    assert shown.settings.lookahead_depth == 7 and "lookahead_depth" not in FLAT


def test_every_knob_has_its_row_in_the_configuration_reference() -> None:
    """docs/configuration.md documents each knob in one row of its field tables (*Search
    profiles*, or *Backfilling baselines* for EASY-k's and LOS's): CONTRIBUTING.md's last
    place of a knob, checked."""
    text = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    section = text[text.index("## Backfilling baselines"):text.index("\n## Metrics")]
    rows = {name: len(re.findall(rf"^\| `{name}` \| ", section, re.M)) for name in SETTINGS}
    assert {name: n for name, n in rows.items() if n != 1} == {}
