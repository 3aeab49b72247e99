"""Dispatchers: one module each behind the interface of `base.Dispatcher`, registered by name.

Every dispatcher is an entry point of the group `hpcdispatch.dispatchers`
(`hpcdispatch.registrations`): the built-ins, which hpcdispatch's pyproject.toml registers, and
the plugins other packages register. The registry makes each the first time it is asked for, and
imports its module then: the CP dispatchers bring OR-Tools (with pandas, about 0.8 s of
imports), which a process that only runs the baselines (a replay of EASY, a test) does not
need. One instance per kind, made once (conservative keeps its reservation book in it).

A plugin's dispatcher is made behind `guard.Guarded` (its own thread within the deadline, its
outcome's shape checked); one whose code fails to load is remembered with its error, and
asking for it raises `PluginUnavailable` naming it, every time, without importing it again.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping, MutableMapping

from hpcdispatch.catalog import registered_dispatchers
from hpcdispatch.registrations import Registered, Registrations

from ..domain.lazy_logger import LazyLogger
from .base import Dispatcher
from .guard import Guarded, PluginUnavailable

log = LazyLogger("hpcdispatch.dispatchers")


def make(entry: Registered) -> Dispatcher:
    """The dispatcher `entry` registers: its object called with no argument; a plugin's behind
    the guard. Raises whatever loading or making it raises, TypeError when what it makes has no
    `decide`."""
    dispatcher = entry.load()()
    if entry.built_in:
        return dispatcher
    if not callable(getattr(dispatcher, "decide", None)):
        raise TypeError(f"{entry.target} made a {type(dispatcher).__name__}, which has no "
                        "decide(problem, control) method")
    return Guarded(dispatcher, entry.name, entry.kind)


class Registry(MutableMapping[int, Dispatcher]):
    """Dispatchers by kind (hpcdispatch.registrations: the enum value of a built-in), each made
    (and its module imported) on first use; one may be replaced (tests put recording stand-ins
    in)."""

    def __init__(self, registrations: Registrations) -> None:
        self.registrations = registrations
        self._entries = {e.kind: e for e in registrations.entries}
        self._made: dict[int, Dispatcher] = {}
        self._failed: dict[int, str] = {}  # kind -> why its code could not be loaded
        self._lock = threading.Lock()

    def __getitem__(self, kind: int) -> Dispatcher:
        made = self._made.get(kind)
        if made is not None:
            return made
        entry = self._entries[kind]  # KeyError for a kind without a dispatcher
        with self._lock:
            made = self._made.get(kind)
            if made is None:
                made = self._made[kind] = self._make(entry)
        return made

    def _make(self, entry: Registered) -> Dispatcher:
        """`make(entry)`, remembering (and logging once) why it failed; under the lock."""
        why = self._failed.get(entry.kind)
        if why is None:
            try:
                return make(entry)
            except (Exception, SystemExit) as exc:  # a plugin's import may do anything
                why = self._failed[entry.kind] = f"{type(exc).__name__}: {exc}"
                log.error("dispatcher could not be loaded", dispatcher=entry.name,
                          target=entry.target, distribution=entry.distribution, error=why)
        raise PluginUnavailable(entry.name, why)

    def load_plugins(self) -> dict[str, str]:
        """Load every plugin's dispatcher now (not the built-ins: their imports stay lazy);
        returns {name: why} of those that could not be loaded."""
        for entry in self.registrations.entries:
            if not entry.built_in:
                with contextlib.suppress(PluginUnavailable):  # remembered in _failed
                    self[entry.kind]
        return self.unavailable()

    def unavailable(self) -> dict[str, str]:
        """{name: why} of the registered dispatchers whose code failed to load so far."""
        with self._lock:
            return {self._entries[k].name: why for k, why in self._failed.items()}

    def __setitem__(self, kind: int, dispatcher: Dispatcher) -> None:
        with self._lock:
            self._made[kind] = dispatcher

    def __delitem__(self, kind: int) -> None:
        with self._lock:
            self._made.pop(kind, None)  # made again on next use

    def __iter__(self) -> Iterator[int]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


class _ByName(Mapping[str, Dispatcher]):
    """The registry by the registered names."""

    def __init__(self, registry: Registry) -> None:
        self._registry = registry

    def __getitem__(self, name: str) -> Dispatcher:
        entry = self._registry.registrations.by_name(name)
        if entry is None:
            raise KeyError(name)
        return self._registry[entry.kind]

    def __iter__(self) -> Iterator[str]:
        return iter(self._registry.registrations.names)

    def __len__(self) -> int:
        return len(self._registry)


REGISTRY = Registry(registered_dispatchers())
DISPATCHERS: Mapping[int, Dispatcher] = REGISTRY
# By the registered names (hpcdispatch.catalog); tests check every enum value has one.
BY_NAME: Mapping[str, Dispatcher] = _ByName(REGISTRY)

__all__ = ["BY_NAME", "DISPATCHERS", "REGISTRY", "Dispatcher", "PluginUnavailable", "Registry"]
