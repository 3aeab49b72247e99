"""What the docs' generated tables say of a built-in dispatcher (scripts/gen_tables.py).

Each built-in class states its own `table: ClassVar[TableRow]` (the script reads no inherited
one: `easy-sjbf` is EASY's subclass, not EASY): its row of README.md's *Dispatchers* and, for
a backfilling baseline, its row of docs/configuration.md's *Backfilling baselines*.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TableRow:
    """A built-in's cells; None where its table shows "–" (or, for `backfill`, where it is no
    backfilling baseline)."""

    summary: str  # what it does (README's *Dispatchers*)
    model_size: str | None = None  # a CP model's size (the same table)
    head: str | None = None  # a backfilling baseline's head reservation
    backfill: str | None = None  # its backfill order
    parameter: str | None = None  # its parameter, as `name` (default)
