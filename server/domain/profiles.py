"""Named search profiles of the CP dispatchers (δ / 2δ / δmax restart policy, window m)."""

from __future__ import annotations

import dataclasses
from typing import Any

from hpcdispatch.retired_profiles import RETIRED as RETIRED
from hpcdispatch.retired_profiles import retired_profile as retired_profile

from .promise_ladder import DEFAULT_RUNG, rung
from .search_settings import SearchRequest, SearchSettings

# The modes a user chooses among (docs/dispatchers.md, "Modes": what each guarantees and costs).
PROFILES: dict[str, tuple[SearchSettings, str]] = {
    "book": (
        SearchSettings(
            "book", delta_ms=100, delta_max_ms=800, k=1, window=100, stall_ms=10,
            promise_after_s=rung(DEFAULT_RUNG).promise_after_s,
            capacity_first=True, more_orders=True, work_conserving=True,
        ),
        "Default: the promise book inside the model (issues #34, #41, #49): a queued job holds "
        "a promised start once it has waited promise_after_s (24 h, the ladder's default rung; "
        "0: every job from its arrival), and the oldest job that cannot start now always holds "
        "one (EASY's head); a promise is a start guaranteed from requested times, kept from one "
        "decision to the next (only a node going down or a job running past its limit moves "
        "it later), with the likely start of the predictor's plan beside it. Every promise is "
        "capacity the selected model (HCP'19, PCP'19, PCP'20) holds over time; its search "
        "(δ = 100 ms, δmax = 800 ms, k = 1, m = 100; capacity used now first, then the papers' "
        "slowdown, from the best of five list schedules) decides what else starts now and when "
        "the unpromised jobs are planned.",
    ),
    "qos": (
        SearchSettings(
            "qos", delta_ms=100, delta_max_ms=800, k=1, window=100, stall_ms=10,
            starvation_wait_s=86_400, work_conserving=True,
        ),
        "The lowest mean bounded slowdown, no promise (the default until issue #49): the same "
        "search (δ = 100 ms, δmax = 800 ms, k = 1, m = 100, 10 ms stall rule) with "
        "service-level guards instead of a reservation for every blocked head: once the oldest "
        "queued job has waited 24 h it is served as EASY's head (it starts now if it fits, else "
        "it holds the reservation), and queued jobs outside the window start now where they fit "
        "without delaying the plan or the reservation.",
    ),
    "papers": (
        SearchSettings("papers", delta_ms=1000, delta_max_ms=16000, k=2, window=100),
        "The CP 2019 / PCP'20 papers' parameters: δ = 1 s, k = 2, δmax = 16 s, m = 100, and "
        "their pure objective (total slowdown of the window, no reservation, no guard).",
    ),
}

DEFAULT_PROFILE = "book"

# Profiles retired by issue #49 and what replaces each (RETIRED, retired_profile):
# hpcdispatch/retired_profiles.py.


def resolve_settings(search: SearchRequest, default_profile: str) -> SearchSettings:
    """The named profile (or the default), with the request's explicit overrides: each
    SearchSettings field the request sets replaces the profile's."""
    base, _ = PROFILES[search.profile or default_profile]
    names = {f.name for f in dataclasses.fields(base)} - {"profile"}
    overrides: dict[str, Any] = {
        name: value for name, value in search.overrides.items() if name in names
    }
    if "delta_max_ms" not in overrides:  # δ <= δmax: a larger δ raises the profile's δmax
        overrides["delta_max_ms"] = max(base.delta_max_ms, overrides.get("delta_ms", 0))
    if "starvation_wait_s" in overrides:
        overrides["starvation_wait_s"] = max(0, overrides["starvation_wait_s"])
    return dataclasses.replace(base, **overrides)
