"""Typed records parsed from `scontrol show reservation -o` (Slurm 22.05 has no JSON for it).

One line per reservation, `Key=Value` fields separated by spaces; the bridge runs the command
with TZ=UTC (slurm_cli.py), so StartTime/EndTime ("2026-12-02T03:50:07") are read as UTC and
become Unix seconds. "(null)" is an empty value. A line without a StartTime, an EndTime or a
name is SlurmParseError (the cycle fails, as an unreadable `squeue` does).
"""

from __future__ import annotations

import calendar
import time
from dataclasses import dataclass

from .slurm_json import SlurmParseError, expand_hostlist

NO_RESERVATIONS = "No reservations in the system"
_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"


@dataclass(frozen=True, slots=True)
class SlurmReservation:
    name: str
    start: int  # Unix seconds
    end: int  # Unix seconds
    nodes: tuple[str, ...]  # expanded; ("ALL",) when Slurm says ALL
    flags: frozenset[str]  # upper case: MAINT, MAGNETIC, SPEC_NODES, ...
    users: tuple[str, ...]  # as Slurm lists them ("-bob" excludes bob)
    accounts: tuple[str, ...]  # idem
    groups: tuple[str, ...]
    partition: str  # PartitionName= ("" when none)

    @property
    def maintenance(self) -> bool:
        return "MAINT" in self.flags


def _fields(line: str) -> dict[str, str]:
    """`Key=Value` tokens; a token without "=" continues the previous value."""
    out: dict[str, str] = {}
    last = ""
    for token in line.split():
        key, eq, value = token.partition("=")
        if eq and key.isalnum():
            out[key] = value
            last = key
        elif last:
            out[last] += " " + token
    return out


def _names(value: str) -> tuple[str, ...]:
    return tuple(v for v in value.split(",") if v and v != "(null)")


def _utc(value: str, field: str, name: str) -> int:
    try:
        return calendar.timegm(time.strptime(value, _TIME_FORMAT))
    except ValueError:
        raise SlurmParseError(f"reservation {name!r}: {field}={value!r} is not "
                              f"{_TIME_FORMAT}") from None


def parse_reservations(text: str) -> list[SlurmReservation]:
    """The reservations of `scontrol show reservation -o` (run with TZ=UTC)."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(NO_RESERVATIONS):
            continue
        f = _fields(line)
        name = f.get("ReservationName", "")
        if not name or "StartTime" not in f or "EndTime" not in f:
            raise SlurmParseError(f"reservation line without name, StartTime or EndTime: "
                                  f"{line[:120]!r}")
        nodes = f.get("Nodes", "")
        out.append(SlurmReservation(
            name=name,
            start=_utc(f["StartTime"], "StartTime", name),
            end=_utc(f["EndTime"], "EndTime", name),
            nodes=() if nodes in ("", "(null)") else expand_hostlist(nodes),
            flags=frozenset(x.upper() for x in _names(f.get("Flags", ""))),
            users=_names(f.get("Users", "")),
            accounts=_names(f.get("Accounts", "")),
            groups=_names(f.get("Groups", "")),
            partition="" if f.get("PartitionName") in (None, "(null)")
            else f["PartitionName"],
        ))
    return out
