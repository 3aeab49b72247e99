"""EASY-LXF: FCFS head reservation, backfill largest expansion factor first.

The expansion factor of queued job i at t is (w_i + d_i) / d_i, with w_i = t - q_i its wait
so far and d_i its predicted duration: the slowdown it would have if it started now (Maui /
Moab's XFactor priority component). The queue is in submit order, so the head (the first job
that does not fit) is the oldest blocked job and holds EASY's reservation; the jobs behind it
are tried for backfilling largest expansion factor first (ties: earlier q_i). A short job
that has waited gains quickly; a long one slowly. With a site's priorities, both orders are in
priority first (higher first), the expansion factor ranking the candidates of equal priority.
"""

from __future__ import annotations

from typing import ClassVar

from .easy import EasyDispatcher
from .planning.job_orders import in_priority_by, xfactor_score
from .planning.problem import Job, Problem
from .table_row import TableRow


class EasyLxfDispatcher(EasyDispatcher):
    name: ClassVar[str] = "easy-lxf"
    # The tables of README.md and docs/configuration.md (scripts/gen_tables.py).
    table: ClassVar[TableRow] = TableRow(
        summary="EASY's head in submit order, backfilling largest expansion factor (w_i + d_i) "
        "/ d_i first (Maui / Moab's XFactor)",
        head="submit order",
        backfill="largest expansion factor (w_i + d_i) / d_i first (Maui / Moab's XFactor)")

    def backfill_order(self, problem: Problem, rest: list[Job]) -> list[Job]:
        return in_priority_by(rest, xfactor_score(problem))
