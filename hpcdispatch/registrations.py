"""The dispatchers and predictors registered by name: Python entry points, read without importing
their code.

A dispatcher is registered in the entry point group `hpcdispatch.dispatchers`, a predictor in
`hpcdispatch.predictors`, by the distribution that ships it: hpcdispatch's own pyproject.toml
registers the built-ins there, and any installed package may add its own (docs/plugins.md).
Reading the groups reads installed metadata only, so the names are known to every process (the
CLI's choices, a client, the server's checks) without importing the server or a plugin; the
code behind a name is imported when it is first asked for (`Registered.load`).

Rules, so that a name means one thing:

- a name is lower case, digits and dashes (`NAME_RULE`), as it appears in metric labels and
  on command lines;
- the names of the contract's enums (`pcp20`, `last-two`) belong to hpcdispatch: only its own
  distribution registers them;
- a name registered twice is kept from hpcdispatch, else from the first distribution found on
  the path; the others are ignored.

Whatever is ignored is listed with the reason (`Registrations.ignored`), and the server logs it
at start. Every registered name has a *kind*, the number the server's tables use: the contract's
enum value for an enum name, else `OUTSIDE_KIND_BASE` plus its rank among the other names. Such a
kind never goes on the wire: requests and reports carry the name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import Any

DISPATCHER_GROUP = "hpcdispatch.dispatchers"
PREDICTOR_GROUP = "hpcdispatch.predictors"
PROJECT = "hpcdispatch"  # the distribution whose registrations are the built-ins
OUTSIDE_KIND_BASE = 1000  # kinds of the names outside the contract's enums start here
NAME_RULE = re.compile(r"[a-z0-9][a-z0-9-]{0,62}\Z")


def distribution_of(entry: EntryPoint) -> str:
    """The normalised name of the distribution that registered `entry` ("" when unknown)."""
    dist = getattr(entry, "dist", None)
    name = getattr(dist, "name", None) or ""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True, slots=True)
class Registered:
    """One registered name: what it selects and where its code comes from."""

    name: str
    kind: int  # the contract's enum value, or OUTSIDE_KIND_BASE + rank (never on the wire)
    target: str  # "module:attribute" of the entry point
    distribution: str  # the package that registered it ("" when unknown)
    entry_point: EntryPoint = field(compare=False, repr=False)

    @property
    def built_in(self) -> bool:
        """Registered by hpcdispatch itself (trusted to honour the search control)."""
        return self.distribution == PROJECT

    def load(self) -> Any:
        """Import the module and return the registered object (raises whatever the import
        raises)."""
        return self.entry_point.load()


@dataclass(frozen=True, slots=True)
class Registrations:
    """The names of one group, the contract's enum names first (in enum order), then the others
    sorted; and the entry points left out, with why."""

    group: str
    entries: tuple[Registered, ...]
    ignored: tuple[tuple[str, str], ...] = ()  # (name, why)
    _by_name: dict[str, Registered] = field(init=False, repr=False, compare=False)
    _by_kind: dict[int, Registered] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {e.name: e for e in self.entries})
        object.__setattr__(self, "_by_kind", {e.kind: e for e in self.entries})

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(e.name for e in self.entries)

    def by_name(self, name: str) -> Registered | None:
        return self._by_name.get(name)

    def by_kind(self, kind: int) -> Registered | None:
        return self._by_kind.get(kind)

    def built_in_names(self) -> tuple[str, ...]:
        return tuple(e.name for e in self.entries if e.built_in)


def read_group(group: str, enum_names: Mapping[str, int],
               found: Iterable[EntryPoint]) -> Registrations:
    """The registrations of `group` among the entry points `found` (in path order), by the
    rules of the module's docstring; `enum_names`: the contract's names and values."""
    kept: dict[str, tuple[EntryPoint, str]] = {}
    ignored: list[tuple[str, str]] = []
    for entry in found:
        if entry.group != group:
            continue
        name, dist = entry.name, distribution_of(entry)
        source = dist or "an unknown distribution"
        if not NAME_RULE.match(name):
            ignored.append((name, f"from {source}: a name is lower case letters, digits and "
                            "dashes, at most 63 characters"))
            continue
        if name in enum_names and dist != PROJECT:
            ignored.append((name, f"from {source}: the contract's own name, registered by "
                            f"{PROJECT} only"))
            continue
        if name in kept:
            first = kept[name][1] or "an unknown distribution"
            if dist == PROJECT and kept[name][1] != PROJECT:
                ignored.append((name, f"from {first}: also registered by {PROJECT}, which keeps "
                                "it"))
                kept[name] = (entry, dist)
            else:
                ignored.append((name, f"from {source}: already registered by {first}"))
            continue
        kept[name] = (entry, dist)
    in_enum = sorted((n for n in kept if n in enum_names), key=enum_names.__getitem__)
    others = sorted(n for n in kept if n not in enum_names)
    kinds = {**{n: enum_names[n] for n in in_enum},
             **{n: OUTSIDE_KIND_BASE + rank for rank, n in enumerate(others)}}
    entries = tuple(
        Registered(n, kinds[n], kept[n][0].value, kept[n][1], kept[n][0])
        for n in (*in_enum, *others)
    )
    return Registrations(group, entries, tuple(ignored))


@cache
def _installed() -> tuple[EntryPoint, ...]:
    """Every entry point of the two groups this process can see (read once)."""
    return (*entry_points(group=DISPATCHER_GROUP), *entry_points(group=PREDICTOR_GROUP))


def installed(group: str, enum_names: Mapping[str, int]) -> Registrations:
    """The registrations of `group` installed for this process."""
    return read_group(group, enum_names, _installed())
