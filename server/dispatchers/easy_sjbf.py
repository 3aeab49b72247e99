"""EASY-SJBF: FCFS head reservation, backfill shortest estimate first.

Tsafrir, Etsion & Feitelson 2007 ("Backfilling using system-generated predictions rather than
user runtime estimates"): the queue is in submit order, so the head (the first job that does
not fit) is the oldest blocked job and holds EASY's reservation; the jobs behind it are tried
for backfilling in order of their predicted duration d_i, shortest first (ties: earlier q_i).
With a site's priorities, both orders are in priority first (higher first): the head is the
first blocked job in priority order, and the backfill candidates are shortest first within
equal priority (`job_orders.in_priority_by`).
"""

from __future__ import annotations

from typing import ClassVar

from .easy import EasyDispatcher
from .planning.job_orders import in_priority_by, sjf_score
from .planning.problem import Job, Problem
from .table_row import TableRow


class EasySjbfDispatcher(EasyDispatcher):
    name: ClassVar[str] = "easy-sjbf"
    # The tables of README.md and docs/configuration.md (scripts/gen_tables.py).
    table: ClassVar[TableRow] = TableRow(
        summary="EASY's head in submit order, backfilling shortest estimate first (Tsafrir et "
        "al. 2007)",
        head="submit order", backfill="shortest d_i first (Tsafrir, Etsion & Feitelson 2007)")

    def backfill_order(self, problem: Problem, rest: list[Job]) -> list[Job]:
        return in_priority_by(rest, sjf_score(problem))
