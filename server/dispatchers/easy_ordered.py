"""EASY backfilling with the queue orders of RLScheduler's comparison (SJF, WFP3, UNICEF, F1).

The algorithm is `easy.EasyDispatcher`'s; only the queue order differs (`job_orders` gives each
formula). Jobs start in that order while they fit; the first one that does not fit is the head
and gets the reservation; the later ones, in the same order, start now only where they leave
the head's reservation intact.
"""

from __future__ import annotations

from typing import ClassVar

from hpcdispatch.v1 import dispatcher_pb2 as pb

from .easy import EasyDispatcher
from .planning import job_orders
from .planning.problem import Job, Problem


class EasySjfDispatcher(EasyDispatcher):
    """Shortest predicted duration d_i first."""

    name: ClassVar[str] = "easy-sjf"
    kind: ClassVar[int] = pb.DISPATCHER_EASY_SJF

    def queue_order(self, problem: Problem) -> list[Job]:
        return job_orders.sjf(problem)


class EasyWfp3Dispatcher(EasyDispatcher):
    """Largest (w_i / d_i)^3 x n_i first."""

    name: ClassVar[str] = "easy-wfp3"
    kind: ClassVar[int] = pb.DISPATCHER_EASY_WFP3

    def queue_order(self, problem: Problem) -> list[Job]:
        return job_orders.wfp3(problem)


class EasyUnicefDispatcher(EasyDispatcher):
    """Largest w_i / (log2(n_i) x d_i) first."""

    name: ClassVar[str] = "easy-unicef"
    kind: ClassVar[int] = pb.DISPATCHER_EASY_UNICEF

    def queue_order(self, problem: Problem) -> list[Job]:
        return job_orders.unicef(problem)


class EasyF1Dispatcher(EasyDispatcher):
    """Smallest log10(d_i) x n_i + 870 x log10(q_i) first."""

    name: ClassVar[str] = "easy-f1"
    kind: ClassVar[int] = pb.DISPATCHER_EASY_F1

    def queue_order(self, problem: Problem) -> list[Job]:
        return job_orders.f1(problem)
