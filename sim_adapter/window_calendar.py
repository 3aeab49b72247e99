"""A replay's unavailability windows: the occurrences of its system's window rules on the
trace's clock (hpcdispatch.site_calendar), those each decision is sent, and the node time they
took.

At t a decision is sent every one-off window that has not ended and the next two occurrences
of each recurring rule that end after t. That is enough for the check: a start at t of
requested time R runs into a rule's occurrence iff it runs into the first one ending after t
(the others begin later). Sent windows change only when one ends, so a session's delta carries
them only then.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import islice

from hpcdispatch.site_calendar import TraceClock, WindowRule
from hpcdispatch.snapshot import UnavailabilityWindow

SENT_PER_RULE = 2  # occurrences of a recurring rule sent at once


class WindowCalendar:
    """The windows of `rules` on the trace clock `clock` (module docstring)."""

    def __init__(self, rules: Sequence[WindowRule], clock: TraceClock) -> None:
        self.rules = tuple(rules)
        self.clock = clock
        self._at: int | None = None
        self._sent: tuple[UnavailabilityWindow, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.rules)

    def at(self, t: int) -> tuple[UnavailabilityWindow, ...]:
        """The windows a decision at t is sent, by start."""
        if self._at is not None and self._at <= t and all(w.end > t for w in self._sent):
            return self._sent  # none has ended since: the same windows
        sent = [w for rule in self.rules
                for w in islice(self.clock.occurrences(rule, t), SENT_PER_RULE)]
        self._at, self._sent = t, tuple(sorted(sent, key=lambda w: (w.start, w.end, w.nodes)))
        return self._sent

    def next_end(self, t: int) -> int | None:
        """The first end after t of a window sent at t (None: no window ends after t)."""
        return min((w.end for w in self.at(t)), default=None)

    def over(self, since: int, until: int) -> Iterator[UnavailabilityWindow]:
        """Every window overlapping [since, until), rule by rule, in time order."""
        for rule in self.rules:
            for window in self.clock.occurrences(rule, since):
                if window.start >= until:
                    break
                yield window

    def lost(self, since: int, until: int, cores: Mapping[str, int]) -> dict[str, float]:
        """The node and core hours the maintenance windows (those admitting nobody) and the
        reservations took over [since, until), with `cores` per node id."""
        hours = {"maintenance_node_hours": 0.0, "maintenance_core_hours": 0.0,
                 "reservation_node_hours": 0.0, "reservation_core_hours": 0.0}
        windows = 0
        for window in self.over(since, until):
            seconds = max(0, min(window.end, until) - max(window.start, since))
            if not seconds:
                continue
            windows += 1
            kind = "reservation" if window.users or window.accounts else "maintenance"
            hours[f"{kind}_node_hours"] += len(window.nodes) * seconds / 3600
            hours[f"{kind}_core_hours"] += sum(cores.get(n, 0) for n in window.nodes) \
                * seconds / 3600
        return {"windows": windows, **hours}
