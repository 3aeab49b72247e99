"""Dispatchers: one module each behind the interface of `base.Dispatcher`."""

from __future__ import annotations

from hpcdispatch.catalog import DISPATCHER_BY_KIND

from .base import Dispatcher
from .conservative import ConservativeDispatcher
from .cp.hcp19 import Hcp19Dispatcher
from .cp.pcp19 import Pcp19Dispatcher
from .cp.pcp20 import Pcp20Dispatcher
from .easy import EasyDispatcher
from .easy_k import EasyKDispatcher
from .easy_lxf import EasyLxfDispatcher
from .easy_ordered import (
    EasyF1Dispatcher,
    EasySjfDispatcher,
    EasyUnicefDispatcher,
    EasyWfp3Dispatcher,
)
from .easy_sjbf import EasySjbfDispatcher
from .fcfs import FcfsDispatcher
from .los import LosDispatcher

DISPATCHERS: dict[int, Dispatcher] = {
    d.kind: d
    for d in (
        FcfsDispatcher(),
        EasyDispatcher(),
        Hcp19Dispatcher(),
        Pcp19Dispatcher(),
        Pcp20Dispatcher(),
        EasySjfDispatcher(),
        EasyWfp3Dispatcher(),
        EasyUnicefDispatcher(),
        EasyF1Dispatcher(),
        ConservativeDispatcher(),
        EasySjbfDispatcher(),
        EasyLxfDispatcher(),
        LosDispatcher(),
        EasyKDispatcher(),
    )
}
# By the contract's names (hpcdispatch.catalog); tests check every enum value has one.
BY_NAME: dict[str, Dispatcher] = {DISPATCHER_BY_KIND[k]: d for k, d in DISPATCHERS.items()}

__all__ = ["BY_NAME", "DISPATCHERS", "Dispatcher"]
