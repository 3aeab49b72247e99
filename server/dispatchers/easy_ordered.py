"""EASY backfilling with the queue orders of RLScheduler's comparison (SJF, WFP3, UNICEF, F1).

The algorithm is `easy.EasyDispatcher`'s; only the queue order differs (`job_orders` gives each
formula). Jobs start in that order while they fit; the first one that does not fit is the head
and gets the reservation; the later ones, in the same order, start now only where they leave
the head's reservation intact. With a site's priorities the order is priority first (higher
first), the formula ranking the jobs of equal priority; without them, the formula's alone.
"""

from __future__ import annotations

from typing import ClassVar

from .easy import EasyDispatcher
from .planning import job_orders
from .planning.problem import Job, Problem
from .table_row import TableRow


def _ordered_row(summary: str) -> TableRow:
    """The tables of README.md and docs/configuration.md (scripts/gen_tables.py): the head and
    the backfill order are the same for each."""
    return TableRow(summary, head="first job of the order that does not fit",
                    backfill="the same order")


class EasySjfDispatcher(EasyDispatcher):
    """Shortest predicted duration d_i first."""

    name: ClassVar[str] = "easy-sjf"
    table: ClassVar[TableRow] = _ordered_row(
        "EASY backfilling with SJF, a queue order RLScheduler compares with: "
        "shortest d_i first")
    promises_head: ClassVar[bool] = False  # a later job may become the head

    def queue_order(self, problem: Problem) -> list[Job]:
        return job_orders.sjf(problem)


class EasyWfp3Dispatcher(EasyDispatcher):
    """Largest (w_i / d_i)^3 x n_i first."""

    name: ClassVar[str] = "easy-wfp3"
    table: ClassVar[TableRow] = _ordered_row(
        "EASY backfilling with WFP3, a queue order RLScheduler compares with: "
        "largest (w_i / d_i)³ · n_i first")
    promises_head: ClassVar[bool] = False  # a later job may become the head

    def queue_order(self, problem: Problem) -> list[Job]:
        return job_orders.wfp3(problem)


class EasyUnicefDispatcher(EasyDispatcher):
    """Largest w_i / (log2(n_i) x d_i) first."""

    name: ClassVar[str] = "easy-unicef"
    table: ClassVar[TableRow] = _ordered_row(
        "EASY backfilling with UNICEF, a queue order RLScheduler compares with: "
        "largest w_i / (log₂ n_i · d_i) first")
    promises_head: ClassVar[bool] = False  # a later job may become the head

    def queue_order(self, problem: Problem) -> list[Job]:
        return job_orders.unicef(problem)


class EasyF1Dispatcher(EasyDispatcher):
    """Smallest log10(d_i) x n_i + 870 x log10(q_i) first."""

    name: ClassVar[str] = "easy-f1"
    table: ClassVar[TableRow] = _ordered_row(
        "EASY backfilling with F1, a queue order RLScheduler compares with: "
        "smallest log₁₀ d_i · n_i + 870 · log₁₀ q_i first")
    promises_head: ClassVar[bool] = False  # a later job may become the head

    def queue_order(self, problem: Problem) -> list[Job]:
        return job_orders.f1(problem)
