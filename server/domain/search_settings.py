"""What a decision's search may do: the restart policy's δ, δmax, k, the window m, and the
profile's service-level steps; and the two parameters of the backfilling baselines (EASY-k's
reservation depth, LOS's lookahead). Named profiles of these settings are in `profiles.py`;
what a request asks of them is a `SearchRequest`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class SearchSettings:
    """The restart policy's δ, δmax (ms) and k, and the window m of the papers' reductions
    (at most m jobs, the highest-priority ones that fit now, enter a model)."""

    profile: str
    delta_ms: int
    delta_max_ms: int
    k: int
    window: int
    stall_ms: int = 0  # end an attempt this long after its last improvement; 0 = never
    protect_head: bool = False  # EASY-like reservation for the oldest job that cannot start
    # EASY's head discipline (`planning.oldest_first`): the oldest jobs start now in submit
    # order while they fit, the first that does not holds EASY's reservation, and the model
    # chooses what else starts now around it.
    easy_head: bool = False
    # With `easy_head`: how many of the oldest blocked jobs hold a reservation that no job
    # started now may delay (`planning.later_reservations`); 1 = the head's only, as EASY.
    easy_head_depth: int = 1
    # Capacity used now first, then slowdown (`planning.processor_packing`): the heuristic plan
    # starts LOS's packing (the most processors now around the head's reservation) when that
    # starts more processors now, and the model keeps Σ n_i now_i at least the heuristic plan's.
    capacity_first: bool = False
    # δ and δmax counted in deterministic time (DETERMINISTIC_SECONDS_PER_MS), one worker, a
    # fixed seed, no stall rule.
    deterministic: bool = False
    # Starvation guard (`dispatchers.starvation_guard`): once the oldest queued job has waited
    # this many seconds, it gets EASY's head treatment (it starts now if it fits, else it holds
    # the reservation). 0 = off.
    starvation_wait_s: int = 0
    # The heuristic plan also tries the list schedules in SJF, F1 and WFP3 order
    # (`dispatchers.list_orders`), so the search starts from the best of five, not two.
    more_orders: bool = False
    # After the decision, every other queued job that fits now on what is still free, without
    # touching the head's reservation, starts now; the plan's later starts hold nothing
    # (`dispatchers.work_conservation`).
    work_conserving: bool = False
    # EASY-k (`easy_k`): how many blocked jobs, in submit order, hold a reservation that no
    # job started now may delay (1 = EASY; flux-sched's "hybrid" queue policy default: 64).
    reservation_depth: int = 64
    # LOS (`los`): how many queued jobs behind the head the packing looks at (Shmueli &
    # Feitelson 2005 use 50).
    lookahead_depth: int = 50
    # The promise book (`cp.promise_decision`): a queued job holds a promised start once it has
    # waited this many seconds (0: from its arrival), kept from one decision to the next and
    # only ever moved earlier; the jobs without one start around every promise, the most
    # processors first, then the papers' priority. -1 = off (no promises).
    promise_after_s: int = -1


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """What a request asks of the search: a named profile ("" = the default) and the settings
    it sets explicitly, by SearchSettings field name; the others come from the profile
    (`profiles.resolve_settings`)."""

    profile: str = ""
    overrides: Mapping[str, int | bool] = field(default_factory=dict)
