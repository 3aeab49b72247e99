"""The in-memory index the predictors read: the latest completions under every filter they use,
within the knowledge base's limits.

For each filter key — (user, name, shape), (user, name), (name), (name prefix), (user) — the
index keeps the DEPTH latest completed jobs, ordered by end time and, at equal end times, by
recording order (sequence number). That is all `data_driven` (the latest run time of the closest
rule that matches) and `last_two` (the user's two latest) ever read, so a prediction is a few
dictionary look-ups, and a decision's whole batch needs no store round trip beyond the refresh
that adds the rows recorded since the last one (`knowledge_base`). Keys no rule reads (a blank
name, an empty name prefix) are not kept.

It also counts what the store holds of the cluster, for the limits (`IndexLimits`): the
completions and the bytes of their text. Beyond `max_completions` or `max_bytes`, completions
are forgotten, and the knowledge base deletes them from the store (`take_forgotten`):

1. first those no key's list holds any more (*spent*: only later completions come before them,
   so no prediction can read them again), in the order they were spent;
2. then, when every one left is read by some key, the oldest (by end time, then recording
   order): the user or application whose latest run is oldest loses its history first.

So predictions stay exactly those of the whole history as long as the completions some key
still reads fit the limits. And because a completion is spent only by later ones, and none is
forgotten for its age while a spent one is left, forgetting never has to bring an older
completion back into a list: the index is at every moment what it would be if built from the
completions the store keeps, so a restarted server (or another replica) reads the same.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass

from .completion_store import StoredCompletion
from .job_keys import kept

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


@dataclass(frozen=True, slots=True)
class IndexLimits:
    """What one cluster's index keeps at most; None: no limit."""

    max_completions: int | None = None
    max_bytes: int | None = None  # UTF-8 bytes of the kept completions' text (`text_bytes`)


Texts = tuple[str, str, str, str]  # user, name, name_prefix, shape as kept


def texts_of(row: StoredCompletion) -> Texts:
    """The row's texts in the form the index keeps (rows stored by older releases may be
    longer)."""
    return (kept(row.user), kept(row.name), kept(row.name_prefix), kept(row.shape))


def text_bytes(texts: Texts) -> int:
    """What the limit `max_bytes` counts of one completion: the UTF-8 bytes of its texts."""
    return sum(len(text.encode("utf-8", "surrogatepass")) for text in texts)


def row_keys(texts: Texts) -> list[FilterKey]:
    """Every filter key under which a completion is found (those some rule can read)."""
    user, name, prefix, shape = texts
    keys: list[FilterKey] = [(user, None, None, None)]
    if name.strip():  # data_driven reads the name rules only for a name that is not blank
        keys += [(user, name, None, shape), (user, name, None, None), (None, name, None, None)]
    if prefix:
        keys.append((None, None, prefix, None))
    return keys


@dataclass(slots=True)
class _Read:
    """A completion some key's list holds: its texts, its entry, its size, and how many key
    lists hold it."""

    texts: Texts
    entry: _Entry
    size: int
    lists: int = 0


class HistoryIndex:
    """The DEPTH latest completions per filter key of one cluster, within `limits`; not
    thread-safe by itself (`knowledge_base.ClusterHistory` guards it)."""

    def __init__(self, limits: IndexLimits | None = None) -> None:
        self.limits = limits if limits is not None else IndexLimits()
        self._latest: dict[FilterKey, list[_Entry]] = {}
        self._read: dict[int, _Read] = {}  # by sequence number
        self._spent: dict[int, int] = {}  # sequence number -> size, the earliest spent first
        self._oldest: list[_Entry] = []  # heap of the entries of _read (and of some gone)
        self._forgotten: list[int] = []  # sequence numbers for the store to delete
        self.kept_bytes = 0  # text of the kept completions (read and spent)
        self.watermark = 0  # the highest sequence number added
        self.rows = 0  # rows added since the index was made
        self.evicted = 0  # completions still read that were forgotten for their age

    @property
    def kept_completions(self) -> int:
        """Completions kept (the store's, once it has deleted the forgotten ones)."""
        return len(self._read) + len(self._spent)

    def add(self, rows: Iterable[StoredCompletion]) -> None:
        """Add rows read from the store (rows at or below the watermark are already in), then
        forget the oldest until within the limits."""
        for row in rows:
            if row.seq <= self.watermark:
                continue
            self.watermark = row.seq
            self.rows += 1
            self._add(row)
        self._within_limits()

    def _add(self, row: StoredCompletion) -> None:
        texts = texts_of(row)
        entry = (row.end_time, row.seq, row.run_time)
        item = _Read(texts, entry, text_bytes(texts))
        self.kept_bytes += item.size
        self._read[row.seq] = item
        for key in row_keys(texts):
            top = self._latest.setdefault(key, [])
            if len(top) == DEPTH:
                if entry < top[-1]:
                    continue  # older than the key's DEPTH latest
                self._leave(top.pop()[1])
            top.append(entry)
            top.sort(reverse=True)
            item.lists += 1
        if item.lists == 0:  # reported late: older than everything under each of its keys
            self._spend(row.seq)
        else:
            heapq.heappush(self._oldest, entry)

    def _leave(self, seq: int) -> None:
        """A completion left one key's list; spent when it is in none any more."""
        item = self._read[seq]
        item.lists -= 1
        if item.lists == 0:
            self._spend(seq)

    def _spend(self, seq: int) -> None:
        self._spent[seq] = self._read.pop(seq).size

    def _over_limits(self) -> bool:
        limits = self.limits
        return (limits.max_completions is not None
                and self.kept_completions > limits.max_completions) or (
            limits.max_bytes is not None and self.kept_bytes > limits.max_bytes)

    def _within_limits(self) -> None:
        """Forget completions until within the limits: the spent ones, then the oldest."""
        while self._over_limits():
            if self._spent:
                seq = next(iter(self._spent))
                self._forget(seq, self._spent.pop(seq))
                continue
            entry = heapq.heappop(self._oldest)
            item = self._read.get(entry[1])
            if item is None:
                continue  # spent and forgotten already
            for key in row_keys(item.texts):
                top = self._latest.get(key)
                if top is not None and entry in top:
                    top.remove(entry)
                    if not top:
                        del self._latest[key]
            del self._read[entry[1]]
            self._forget(entry[1], item.size)
            self.evicted += 1
        # The heap keeps the entries of spent completions until they come up: rebuild it once
        # they dominate.
        if len(self._oldest) > 2 * len(self._read) + 1024:
            self._oldest = [item.entry for item in self._read.values()]
            heapq.heapify(self._oldest)

    def _forget(self, seq: int, size: int) -> None:
        self.kept_bytes -= size
        self._forgotten.append(seq)

    def take_forgotten(self) -> list[int]:
        """The sequence numbers forgotten since the last call (for the store to delete)."""
        forgotten, self._forgotten = self._forgotten, []
        return forgotten

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
