"""The in-memory index the predictors read: the latest completions under every filter they use.

For each filter key — (user, name, shape), (user, name), (name), (name prefix), (user) — the
index keeps the DEPTH latest completed jobs, ordered by end time and, at equal end times, by
recording order (sequence number). That is all `data_driven` (the latest run time of the closest
rule that matches) and `last_two` (the user's two latest) ever read, so a prediction is a few
dictionary look-ups, and a decision's whole batch needs no store round trip beyond the refresh
that adds the rows recorded since the last one (`knowledge_base`). Memory grows with the
distinct keys, not with the history.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .completion_store import StoredCompletion

DEPTH = 2  # last_two reads two; data_driven one

# (user, name, name_prefix, shape); None means "any".
FilterKey = tuple[str | None, str | None, str | None, str | None]
_Entry = tuple[int, int, int]  # (end_time, seq, run_time): larger is later

# Which fields a filter may set: the ones the index is keyed by.
INDEXED_FIELDS = frozenset({
    (True, True, False, True),   # full profile: user, name, shape
    (True, True, False, False),  # user and name
    (False, True, False, False),  # name
    (False, False, True, False),  # name prefix
    (True, False, False, False),  # user
})


@dataclass(frozen=True, slots=True)
class HistoryFilter:
    """Which completed jobs to look at; None means any. Fields are the store's columns."""

    user: str | None = None
    name: str | None = None
    name_prefix: str | None = None
    shape: str | None = None

    @property
    def key(self) -> FilterKey:
        return (self.user, self.name, self.name_prefix, self.shape)


def row_keys(row: StoredCompletion) -> tuple[FilterKey, ...]:
    """Every filter key under which a completion is found."""
    return (
        (row.user, row.name, None, row.shape),
        (row.user, row.name, None, None),
        (None, row.name, None, None),
        (None, None, row.name_prefix, None),
        (row.user, None, None, None),
    )


class HistoryIndex:
    """The DEPTH latest completions per filter key of one cluster; not thread-safe by itself
    (`knowledge_base.ClusterHistory` guards it)."""

    def __init__(self) -> None:
        self._latest: dict[FilterKey, list[_Entry]] = {}
        self.watermark = 0  # the highest sequence number added
        self.rows = 0

    def add(self, rows: Iterable[StoredCompletion]) -> None:
        """Add rows read from the store; rows at or below the watermark are already in."""
        latest = self._latest
        for row in rows:
            if row.seq <= self.watermark:
                continue
            self.watermark = row.seq
            self.rows += 1
            entry = (row.end_time, row.seq, row.run_time)
            for key in row_keys(row):
                top = latest.get(key)
                if top is None:
                    latest[key] = [entry]
                elif len(top) < DEPTH or entry > top[-1]:
                    top.append(entry)
                    top.sort(reverse=True)
                    del top[DEPTH:]

    def latest_run_time(self, key: FilterKey) -> int | None:
        """Run time of the latest job under `key` (a key of `row_keys`' form), or None."""
        top = self._latest.get(key)
        return top[0][2] if top else None

    def last_run_times(self, where: HistoryFilter, limit: int) -> list[int]:
        """Run times of the latest `limit` (<= DEPTH) matching jobs, the latest first."""
        fields = tuple(value is not None for value in where.key)
        if fields not in INDEXED_FIELDS:
            raise ValueError(f"the history index has no key for {where}")
        if not 0 <= limit <= DEPTH:
            raise ValueError(f"the history index keeps the latest {DEPTH} jobs, not {limit}")
        return [run_time for (_, _, run_time) in self._latest.get(where.key, ())][:limit]
