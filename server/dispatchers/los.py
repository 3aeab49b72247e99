"""LOS, lookahead optimising scheduler (Shmueli & Feitelson 2005): pack the most processors now.

Jobs start in submit order while they fit, and the first one that does not fit (the head) gets
EASY's reservation at τ: EASY's own steps (`LosDispatcher` is an `EasyDispatcher` that chooses
differently only around the head). Of the next L queued jobs (the lookahead,
`SearchSettings.lookahead_depth`, `search.lookahead_depth` in a request; 50 by default, the
paper's), LOS starts now the set that maximises the processors used now without delaying the
head's start (their Reservation_DP, `planning.processor_packing`). Its jobs are then placed
node by node around the reservation in submit order (one that cannot be placed waits,
BLOCKED), and the other lookahead jobs are tried after them in submit order, as EASY would, on
what is left. Jobs past the lookahead wait (OUTSIDE_WINDOW). Difference from the paper: a head
that fits starts (the paper's Basic_DP may pass it over when others pack better).

Past the deadline, or once the caller is gone, the jobs placed so far are the decision and the
rest wait (BLOCKED).
"""

from __future__ import annotations

from typing import ClassVar

from ..domain.free_pool import FreePool
from ..domain.outcome_kinds import SkipReason
from .base import Outcome, SearchControl
from .easy import EasyDispatcher, backfill_around, promised_at_the_limits, reserve_for_head
from .planning.problem import Job, Problem
from .planning.processor_packing import most_processors_now
from .planning.stopping import Stopped
from .table_row import TableRow


class LosDispatcher(EasyDispatcher):
    name: ClassVar[str] = "los"
    # The tables of README.md and docs/configuration.md (scripts/gen_tables.py).
    table: ClassVar[TableRow] = TableRow(
        summary="EASY's head, and of the next `lookahead_depth` jobs (50) the set that starts "
        "the most processors now without delaying it (Shmueli & Feitelson 2005)",
        head="submit order",
        backfill="of the next `lookahead_depth` jobs, the set with the most processors now that "
        "does not delay the head (Shmueli & Feitelson 2005, dynamic programme)",
        parameter="`lookahead_depth` (50)")

    def around_the_head(
        self, problem: Problem, control: SearchControl, outcome: Outcome, free_now: FreePool,
        head: Job, rest: list[Job],
    ) -> Outcome:
        """Of the `lookahead_depth` jobs after the head, the packing's set is tried first, then
        the others in queue order, each around the head's reservation; later jobs wait."""
        try:
            reservation = reserve_for_head(problem, outcome, free_now, head, control)
        except Stopped:
            return self._stopped(outcome, [head, *rest])
        outcome.considered.append(head.index)
        outcome.expected_starts[head.index] = (reservation.start, self.promises_head)
        depth = max(1, control.settings.lookahead_depth)
        window = rest[:depth]
        outcome.skipped.extend((j.index, SkipReason.OUTSIDE_WINDOW) for j in rest[depth:])
        chosen = most_processors_now(problem, free_now, reservation, window)
        picked = set(chosen)
        tried = [window[k] for k in chosen] + [
            j for k, j in enumerate(window) if k not in picked]
        backfill_around(outcome, free_now, reservation, tried, control.first_fit,
                        control.should_stop, problem.eligibility)
        return promised_at_the_limits(problem, outcome)
