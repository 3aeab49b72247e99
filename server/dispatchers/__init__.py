"""Dispatchers: one module each behind the interface of `base.Dispatcher`."""

from __future__ import annotations

from hpcdispatch.server.dispatchers.base import Dispatcher
from hpcdispatch.server.dispatchers.easy import EasyDispatcher
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
    )
}
BY_NAME: dict[str, Dispatcher] = {d.name: d for d in DISPATCHERS.values()}

__all__ = ["BY_NAME", "DISPATCHERS", "Dispatcher"]
