"""Named search profiles of the CP dispatchers (δ / 2δ / δmax restart policy, window m)."""

from __future__ import annotations

from hpcdispatch.v1 import dispatcher_pb2 as pb

from .base import SearchSettings

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


def resolve_settings(search: pb.SearchParameters, default_profile: str) -> SearchSettings:
    """The named profile (or the default), with the request's explicit overrides."""
    base, _ = PROFILES[search.profile or default_profile]
    return SearchSettings(
        profile=base.profile,
        delta_ms=search.delta_ms if search.HasField("delta_ms") else base.delta_ms,
        delta_max_ms=(
            search.delta_max_ms if search.HasField("delta_max_ms")
            else max(base.delta_max_ms, search.delta_ms if search.HasField("delta_ms") else 0)
        ),
        k=search.k if search.HasField("k") else base.k,
        window=search.window if search.HasField("window") else base.window,
        stall_ms=search.stall_ms if search.HasField("stall_ms") else base.stall_ms,
        protect_head=(
            search.protect_head if search.HasField("protect_head") else base.protect_head
        ),
        deterministic=(
            search.deterministic if search.HasField("deterministic") else base.deterministic
        ),
        starvation_wait_s=(
            max(0, search.starvation_wait_s) if search.HasField("starvation_wait_s")
            else base.starvation_wait_s
        ),
        more_orders=search.more_orders if search.HasField("more_orders") else base.more_orders,
        work_conserving=(
            search.work_conserving if search.HasField("work_conserving")
            else base.work_conserving
        ),
        reservation_depth=(
            search.reservation_depth if search.HasField("reservation_depth")
            else base.reservation_depth
        ),
        easy_head=search.easy_head if search.HasField("easy_head") else base.easy_head,
        easy_head_depth=(
            search.easy_head_depth if search.HasField("easy_head_depth")
            else base.easy_head_depth
        ),
        lookahead_depth=(
            search.lookahead_depth if search.HasField("lookahead_depth")
            else base.lookahead_depth
        ),
    )
