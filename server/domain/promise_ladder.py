"""The promise book's one knob and its ladder: how long a job waits before it holds a promise.

`SearchSettings.promise_after_s` is the knob a site sets: a queued job that has waited that long
holds a promised start, kept from one decision to the next and only ever moved earlier; the
oldest job that cannot start now holds one whatever it says (EASY's head). Lower, more jobs are
promised earlier (every job at arrival is conservative backfilling's guarantee); higher, the
selected model chooses more freely what starts now (never: only EASY's head is promised). The
ladder is the values measured on every trace, fixed in advance, one plot of mean bounded
slowdown against longest wait per trace reading the trade-off off it
(`benchmarks/qos/frontier.py`, BENCHMARKS.md §1.5).
"""

from __future__ import annotations

from dataclasses import dataclass

# A wait no job reaches (the largest value of SearchParameters.promise_after_s, about 68
# years): no job holds a promise for waiting, only EASY's head does.
NEVER = 2**31 - 1


@dataclass(frozen=True, slots=True)
class Rung:
    """One value of the knob, with the name the tables and plots use."""

    name: str
    promise_after_s: int
    says: str  # what a user is told, in a few words


LADDER: tuple[Rung, ...] = (
    Rung("arrival", 0, "every job holds a promise from its arrival (conservative backfilling)"),
    Rung("1h", 3_600, "a job holds a promise once it has waited 1 hour"),
    Rung("4h", 14_400, "a job holds a promise once it has waited 4 hours"),
    Rung("12h", 43_200, "a job holds a promise once it has waited 12 hours"),
    Rung("24h", 86_400, "a job holds a promise once it has waited 24 hours"),
    Rung("head", NEVER, "only the oldest job that cannot start now (EASY's head)"),
)
DEFAULT_RUNG = "24h"  # the `book` profile's, chosen on the public traces (BENCHMARKS.md §1.5)


def rung(name: str) -> Rung:
    """The rung of that name; ValueError naming the ladder's otherwise."""
    for step in LADDER:
        if step.name == name:
            return step
    raise ValueError(f"unknown rung {name!r}; one of {', '.join(r.name for r in LADDER)}")


def rung_of(promise_after_s: int) -> Rung | None:
    """The rung with this value of the knob, if it is one of the ladder's."""
    return next((step for step in LADDER if step.promise_after_s == promise_after_s), None)
