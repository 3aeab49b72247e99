"""Dispatchers: one module each behind the interface of `base.Dispatcher`.

The registry makes each dispatcher the first time it is asked for, and imports its module
then: the CP dispatchers bring OR-Tools (with pandas, about 0.8 s of imports), which a
process that only runs the baselines (a replay of EASY, a test) does not need. One instance per
kind, made once (conservative keeps its reservation book in it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, MutableMapping

from hpcdispatch.catalog import DISPATCHER_BY_KIND, DISPATCHER_NAMES

from .base import Dispatcher


def _fcfs() -> Dispatcher:
    from .fcfs import FcfsDispatcher
    return FcfsDispatcher()


def _easy() -> Dispatcher:
    from .easy import EasyDispatcher
    return EasyDispatcher()


def _hcp19() -> Dispatcher:
    from .cp.hcp19 import Hcp19Dispatcher
    return Hcp19Dispatcher()


def _pcp19() -> Dispatcher:
    from .cp.pcp19 import Pcp19Dispatcher
    return Pcp19Dispatcher()


def _pcp20() -> Dispatcher:
    from .cp.pcp20 import Pcp20Dispatcher
    return Pcp20Dispatcher()


def _easy_sjf() -> Dispatcher:
    from .easy_ordered import EasySjfDispatcher
    return EasySjfDispatcher()


def _easy_wfp3() -> Dispatcher:
    from .easy_ordered import EasyWfp3Dispatcher
    return EasyWfp3Dispatcher()


def _easy_unicef() -> Dispatcher:
    from .easy_ordered import EasyUnicefDispatcher
    return EasyUnicefDispatcher()


def _easy_f1() -> Dispatcher:
    from .easy_ordered import EasyF1Dispatcher
    return EasyF1Dispatcher()


def _conservative() -> Dispatcher:
    from .conservative import ConservativeDispatcher
    return ConservativeDispatcher()


def _easy_sjbf() -> Dispatcher:
    from .easy_sjbf import EasySjbfDispatcher
    return EasySjbfDispatcher()


def _easy_lxf() -> Dispatcher:
    from .easy_lxf import EasyLxfDispatcher
    return EasyLxfDispatcher()


def _los() -> Dispatcher:
    from .los import LosDispatcher
    return LosDispatcher()


def _easy_k() -> Dispatcher:
    from .easy_k import EasyKDispatcher
    return EasyKDispatcher()


# The contract's names (hpcdispatch.catalog) -> how to make the dispatcher.
_MAKERS: dict[str, Callable[[], Dispatcher]] = {
    "fcfs": _fcfs, "easy": _easy, "hcp19": _hcp19, "pcp19": _pcp19, "pcp20": _pcp20,
    "easy-sjf": _easy_sjf, "easy-wfp3": _easy_wfp3, "easy-unicef": _easy_unicef,
    "easy-f1": _easy_f1, "conservative": _conservative, "easy-sjbf": _easy_sjbf,
    "easy-lxf": _easy_lxf, "los": _los, "easy-k": _easy_k,
}


class Registry(MutableMapping[int, Dispatcher]):
    """Dispatchers by pb.Dispatcher kind, each made (and its module imported) on first use;
    one may be replaced (tests put recording stand-ins in)."""

    def __init__(self, makers: Mapping[str, Callable[[], Dispatcher]]) -> None:
        self._makers = {DISPATCHER_NAMES[name]: make for name, make in makers.items()}
        self._made: dict[int, Dispatcher] = {}
        self._lock = threading.Lock()

    def __getitem__(self, kind: int) -> Dispatcher:
        made = self._made.get(kind)
        if made is not None:
            return made
        make = self._makers[kind]  # KeyError for a kind without a dispatcher
        with self._lock:
            made = self._made.get(kind)
            if made is None:
                made = self._made[kind] = make()
        return made

    def __setitem__(self, kind: int, dispatcher: Dispatcher) -> None:
        with self._lock:
            self._made[kind] = dispatcher
            self._makers.setdefault(kind, lambda: dispatcher)

    def __delitem__(self, kind: int) -> None:
        with self._lock:
            self._made.pop(kind, None)  # made again on next use

    def __iter__(self) -> Iterator[int]:
        return iter(self._makers)

    def __len__(self) -> int:
        return len(self._makers)


class _ByName(Mapping[str, Dispatcher]):
    """The registry by the contract's names."""

    def __init__(self, registry: Registry) -> None:
        self._registry = registry

    def __getitem__(self, name: str) -> Dispatcher:
        return self._registry[DISPATCHER_NAMES[name]]

    def __iter__(self) -> Iterator[str]:
        return (DISPATCHER_BY_KIND[kind] for kind in self._registry)

    def __len__(self) -> int:
        return len(self._registry)


_REGISTRY = Registry(_MAKERS)
DISPATCHERS: Mapping[int, Dispatcher] = _REGISTRY
# By the contract's names (hpcdispatch.catalog); tests check every enum value has one.
BY_NAME: Mapping[str, Dispatcher] = _ByName(_REGISTRY)

__all__ = ["BY_NAME", "DISPATCHERS", "Dispatcher", "Registry"]
