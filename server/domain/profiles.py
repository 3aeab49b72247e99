"""Named search profiles of the CP dispatchers (δ / 2δ / δmax restart policy, window m)."""

from __future__ import annotations

import dataclasses
from typing import Any

from .promise_ladder import DEFAULT_RUNG, rung
from .search_settings import SearchRequest, SearchSettings

PROFILES: dict[str, tuple[SearchSettings, str]] = {
    "qos": (
        SearchSettings(
            "qos", delta_ms=100, delta_max_ms=800, k=1, window=100, stall_ms=10,
            starvation_wait_s=86_400, work_conserving=True,
        ),
        "Default: the fast profile's search (δ = 100 ms, δmax = 800 ms, k = 1, m = 100, 10 ms "
        "stall rule) with service-level guards instead of a reservation for every blocked "
        "head: once the oldest queued job has waited 24 h it is served as EASY's head (it "
        "starts now if it fits, else it holds the reservation), and queued jobs outside the "
        "window start now where they fit without delaying the plan or the reservation.",
    ),
    "promises": (
        SearchSettings(
            "promises", delta_ms=100, delta_max_ms=800, k=1, window=100, stall_ms=10,
            easy_head=True, work_conserving=True,
        ),
        "Keeps EASY's promises at every decision (issue #24): the oldest jobs start now in "
        "submit order while they fit, exactly as EASY starts them; the first that does not "
        "holds EASY's reservation; the model (the fast profile's search) chooses which of the "
        "other jobs start now around it by the papers' slowdown, and jobs outside the window "
        "that fit around the plan and the reservation start too.",
    ),
    "packing": (
        SearchSettings(
            "packing", delta_ms=100, delta_max_ms=800, k=1, window=100, stall_ms=10,
            easy_head=True, work_conserving=True, capacity_first=True,
        ),
        "`promises` with capacity used now first (issue #24): around EASY's prefix and head "
        "reservation, the jobs that start now use the most processors LOS's packing finds, "
        "and among such sets the model starts the one with the least total slowdown.",
    ),
    "book": (
        SearchSettings(
            "book", delta_ms=100, delta_max_ms=800, k=1, window=100, stall_ms=10,
            promise_after_s=rung(DEFAULT_RUNG).promise_after_s, capacity_first=True,
            more_orders=True, work_conserving=True,
        ),
        "The promise book inside the model (issues #34, #41): a queued job holds a promised "
        "start once it has waited promise_after_s (24 h, the ladder's default rung; 0: every "
        "job from its arrival), and the oldest job that cannot start now always holds one "
        "(EASY's head); a promise is computed against requested times (running work to its "
        "limit, each promised job for its requested time), kept from one decision to the next "
        "and only ever moved earlier: only a job running past its limit or a node going down "
        "moves it later. Every promise is capacity the selected "
        "model (HCP'19, PCP'19, PCP'20) holds over time; its search (the fast profile's, "
        "capacity used now first, then the papers' slowdown, from the best of five list "
        "schedules) decides what else starts now and when the unpromised jobs are planned.",
    ),
    "papers": (
        SearchSettings("papers", delta_ms=1000, delta_max_ms=16000, k=2, window=100),
        "The CP 2019 / PCP'20 papers' parameters: δ = 1 s, k = 2, δmax = 16 s, m = 100, and "
        "their pure objective (total slowdown of the window, no reservation, no guard).",
    ),
    "fast": (
        SearchSettings(
            "fast", delta_ms=100, delta_max_ms=800, k=1, window=100, stall_ms=10,
            protect_head=True,
        ),
        "The default until issue #13: δ = 100 ms, δmax = 800 ms, k = 1 (the first attempt "
        "with a solution is final), m = 100, and an attempt ends 10 ms after its last "
        "improving solution. Every attempt is hinted with the incumbent. The oldest job that "
        "cannot start now gets EASY's reservation.",
    ),
}

DEFAULT_PROFILE = "qos"


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
