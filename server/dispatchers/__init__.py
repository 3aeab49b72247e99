"""Dispatchers: one module each behind the interface of `base.Dispatcher`."""

from __future__ import annotations

from hpcdispatch.server.catalog import DISPATCHER_BY_KIND
from hpcdispatch.server.dispatchers.base import Dispatcher
from hpcdispatch.server.dispatchers.conservative import ConservativeDispatcher
from hpcdispatch.server.dispatchers.easy import EasyDispatcher
from hpcdispatch.server.dispatchers.easy_ordered import (
    EasyF1Dispatcher,
    EasySjfDispatcher,
    EasyUnicefDispatcher,
    EasyWfp3Dispatcher,
)
from hpcdispatch.server.dispatchers.fcfs import FcfsDispatcher
from hpcdispatch.server.dispatchers.hcp19 import Hcp19Dispatcher
from hpcdispatch.server.dispatchers.pcp19 import Pcp19Dispatcher
from hpcdispatch.server.dispatchers.pcp20 import Pcp20Dispatcher

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
    )
}
# By the contract's names (hpcdispatch.server.catalog); tests check every enum value has one.
BY_NAME: dict[str, Dispatcher] = {DISPATCHER_BY_KIND[k]: d for k, d in DISPATCHERS.items()}

__all__ = ["BY_NAME", "DISPATCHERS", "Dispatcher"]
