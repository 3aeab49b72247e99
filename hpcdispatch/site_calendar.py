"""A system's unavailability windows as a system file gives them, and their occurrences on a
trace's clock (docs/replays.md, *System files*).

A window rule is one-off, [from, to) in seconds of the trace's clock, or recurring: every day or
every week at a local time (`at: "tue 06:00"`) for a length (`for: 4h`). A recurring rule is
read in the trace's own time zone: second 0 of the trace's clock is its header's UnixStartTime
in its TimeZoneString (`TraceClock.of_header`); a trace without them starts on a Monday at
00:00 UTC. Either kind may admit users or accounts (a reservation); one admitting nobody is a
maintenance.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from hpcdispatch.snapshot import UnavailabilityWindow

MINUTE, HOUR, DAY = 60, 3600, 86400
WEEK = 7 * DAY
PERIODS = {"day": DAY, "week": WEEK}  # `every:` -> its period, seconds
WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_UNITS = {"w": WEEK, "d": DAY, "h": HOUR, "m": MINUTE, "s": 1}
_DURATION = re.compile(r"^\s*(?:\d+\s*[wdhms]\s*)+$")
_AT = re.compile(r"^\s*(?:([a-z]{3})\s+)?(\d{1,2}):(\d{2})\s*$")
# A trace without UnixStartTime starts here: Monday 5 January 1970, 00:00 UTC.
MONDAY_EPOCH = 4 * DAY


def parse_duration(value: object) -> int:
    """Seconds of `value`: a whole number of seconds, or a text such as "4h", "1d 6h", "90m";
    ValueError saying what is accepted."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and _DURATION.match(value):
        return sum(int(n) * _UNITS[u] for n, u in re.findall(r"(\d+)\s*([wdhms])", value))
    raise ValueError(f"a duration is whole seconds or a text such as 4h, 1d 6h, 90m; "
                     f"not {value!r}")


def parse_at(value: object, period: int) -> int:
    """The offset in its period of `at:`: "tue 06:00" from Monday 00:00 (weekly), "06:00"
    from midnight (daily); ValueError saying what is accepted."""
    match = _AT.match(value) if isinstance(value, str) else None
    day = match.group(1) if match else None
    hours, minutes = (int(match.group(2)), int(match.group(3))) if match else (24, 0)
    weekly = period == WEEK
    if match is None or hours > 23 or minutes > 59 or (day is None) == weekly or (
            day is not None and day not in WEEKDAYS):
        form = '"DAY HH:MM" with DAY one of ' + ", ".join(WEEKDAYS) if weekly else '"HH:MM"'
        raise ValueError(f"'at' is {form}; not {value!r}")
    return (WEEKDAYS.index(day) * DAY if day else 0) + hours * HOUR + minutes * MINUTE


@dataclass(frozen=True, slots=True)
class WindowRule:
    """Nodes unavailable, except to `users` / `accounts`: once over [start, start + length)
    (`period` 0, start on the trace's clock), or every `period` seconds from `start` seconds
    after the period's local beginning (Monday 00:00 for a week, midnight for a day)."""

    nodes: tuple[str, ...]
    start: int
    length: int  # seconds, > 0
    period: int = 0  # 0: once; DAY or WEEK
    users: tuple[str, ...] = ()
    accounts: tuple[str, ...] = ()
    name: str = ""

    @property
    def maintenance(self) -> bool:
        """Whether it admits nobody."""
        return not (self.users or self.accounts)

    def window(self, start: int) -> UnavailabilityWindow:
        return UnavailabilityWindow(self.nodes, start, start + self.length, self.users,
                                    self.accounts)


@dataclass(frozen=True, slots=True)
class TraceClock:
    """Where second 0 of a trace's clock falls: `unix_start` in the zone `zone`."""

    unix_start: int = MONDAY_EPOCH
    zone: tzinfo = UTC

    @staticmethod
    def of_header(unix_start: int | None, zone_name: str | None) -> TraceClock:
        """The clock of a trace header's UnixStartTime and TimeZoneString (a Monday 00:00 UTC
        start without the first; UTC without the second, or for a zone this machine lacks)."""
        zone: tzinfo = UTC
        if zone_name:
            try:
                zone = ZoneInfo(zone_name.strip())
            except (ZoneInfoNotFoundError, ValueError):
                zone = UTC
        return TraceClock(MONDAY_EPOCH if unix_start is None else unix_start, zone)

    def occurrences(self, rule: WindowRule, after: int) -> Iterator[UnavailabilityWindow]:
        """The rule's windows that end after `after` (trace seconds), in time order."""
        if not rule.period:
            if rule.start + rule.length > after:
                yield rule.window(rule.start)
            return
        zero = datetime.fromtimestamp(self.unix_start, self.zone)
        # The local beginning of the period holding trace second 0, as a wall-clock time.
        begin = zero.replace(tzinfo=None, hour=0, minute=0, second=0, microsecond=0)
        if rule.period == WEEK:
            begin -= timedelta(days=zero.weekday())
        k = max(0, (after - rule.length) // rule.period - 1)
        while True:
            local = begin + timedelta(seconds=k * rule.period + rule.start)
            start = int(local.replace(tzinfo=self.zone).timestamp()) - self.unix_start
            k += 1
            if start + rule.length > after:
                yield rule.window(start)
