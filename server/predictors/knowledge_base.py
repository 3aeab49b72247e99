"""The knowledge base: the completed jobs the service was told about, per cluster name, within
its limits.

Completions are written to a store (`store_location`: SQLite, embedded, or PostgreSQL, shared
by replicas) and read by the predictors from an in-memory index per cluster (`history_index`).
The index is refreshed from the store with one query for the rows recorded since its last one:
before a read when it is older than `refresh_seconds` (so another replica's completions are
seen within that), and at once when this process records (so a report is indexed, and what the
index forgets deleted from the store, before it is acknowledged).

Limits (`KnowledgeBaseLimits`, the `knowledge_base_*` configuration keys): per cluster, at
most `max_completions` completions and `max_bytes` of their text are kept; beyond, those no
prediction can read any more go first, then the oldest (`history_index`), and what the index
forgets is deleted from the store. At most `max_clusters` clusters keep a history: when one more
cluster reports, the cluster whose latest report is oldest is forgotten, its rows deleted; and
at most as many clusters' indexes and predictors are held in memory (the least recently used is
dropped, and read back from the store when asked for again).

When the store cannot be read, the predictors go on from what the index already holds (for a
cluster never read, that is nothing: every job gets its requested time), `on_fallback(cluster)`
is called once per read batch (the service counts it in
`hpcdispatch_predictor_store_fallbacks_total`), and the store is not tried again for
`retry_seconds`, so a store outage never fails nor slows every decision. Writing is different:
`record` raises StoreUnavailable, because a completion that was not stored must not be
acknowledged.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from ..domain.duration_predictor import Completion, DurationPredictor
from .completion_store import (
    CompletionStore,
    StoreUnavailable,
    completion_rows,
)
from .history_index import HistoryFilter, HistoryIndex, IndexLimits
from .job_keys import kept
from .store_location import open_store

DEFAULT_REFRESH_SECONDS = 1.0
DEFAULT_RETRY_SECONDS = 5.0
# Forgotten rows a store that is down may owe before the oldest of them are given up (a
# restarted server forgets them again when it reads them).
MAX_PENDING_DELETES = 100_000

FallbackListener = Callable[[str], None]  # cluster name


@dataclass(frozen=True, slots=True)
class KnowledgeBaseLimits:
    """What the knowledge base keeps at most; None: no limit (the service always sets them)."""

    max_completions: int | None = None  # per cluster, kept completions
    max_bytes: int | None = None  # per cluster, UTF-8 bytes of their text
    max_clusters: int | None = None  # clusters with a history (and held in memory)

    @property
    def per_cluster(self) -> IndexLimits:
        return IndexLimits(self.max_completions, self.max_bytes)


class ClusterHistory:
    """The completed jobs of one cluster: what a predictor reads and learns into."""

    def __init__(
        self, knowledge_base: KnowledgeBase, cluster: str, refresh_seconds: float,
        retry_seconds: float, limits: IndexLimits | None = None,
    ) -> None:
        self.knowledge_base = knowledge_base
        self.cluster = cluster
        self.refresh_seconds = refresh_seconds
        self.retry_seconds = retry_seconds
        self._index = HistoryIndex(limits)
        self._lock = threading.Lock()  # guards the index and the predictors
        self._refreshing = threading.Lock()  # one reader of the store at a time
        self._stale = True  # this process recorded something the index has not read yet
        self._refreshed_at = -math.inf
        self._failed_at: float | None = None
        self._owed: list[int] = []  # rows the index forgot that the store still holds
        self._predictors: dict[int, DurationPredictor] = {}

    def predictor(
        self, kind: int, make: Callable[[ClusterHistory], DurationPredictor]
    ) -> DurationPredictor:
        """The cluster's predictor of this kind, made once (it lives as long as this history)."""
        with self._lock:
            found = self._predictors.get(kind)
            if found is None:
                found = self._predictors[kind] = make(self)
            return found

    def invalidate(self) -> None:
        """The next read refreshes the index first (called after this process recorded)."""
        self._stale = True

    def refresh(self, reading: bool = True) -> bool:
        """Bring the index up to date if it is due, and delete from the store what the index
        forgot; False if the store could not be read (the index stays as it was, and, when
        `reading` for predictions, the fallback is reported)."""
        now = time.monotonic()
        if self._failed_at is not None and now - self._failed_at < self.retry_seconds:
            if reading:
                self.knowledge_base.report_fallback(self.cluster)
            return False
        if not self._stale and now - self._refreshed_at < self.refresh_seconds:
            return True
        # After a local write, wait for a refresh in progress (it may predate the write);
        # otherwise a refresh in progress is as fresh as needed.
        if not self._refreshing.acquire(blocking=self._stale):
            return True
        try:
            stale, self._stale = self._stale, False  # a write from here on sets it again
            try:
                rows = self.knowledge_base.store.rows_since(self.cluster, self._index.watermark)
            except StoreUnavailable:
                self._stale = self._stale or stale
                self._failed_at = now
                if reading:
                    self.knowledge_base.report_fallback(self.cluster)
                return False
            with self._lock:
                self._index.add(rows)
                self._owed += self._index.take_forgotten()
            self._refreshed_at = now
            self._failed_at = None
            self._delete_owed()
            return True
        finally:
            self._refreshing.release()

    def _delete_owed(self) -> None:
        """Delete from the store the rows the index forgot (kept for the next refresh while the
        store cannot be written, the oldest given up beyond MAX_PENDING_DELETES)."""
        if not self._owed:
            return
        try:
            self.knowledge_base.store.forget(self.cluster, self._owed)
        except StoreUnavailable:
            del self._owed[:-MAX_PENDING_DELETES]
            return
        self._owed = []

    @contextmanager
    def reading(self) -> Iterator[HistoryIndex]:
        """The index, refreshed if due, held for one batch of look-ups."""
        self.refresh()
        with self._lock:
            yield self._index

    def last_run_times(self, where: HistoryFilter, limit: int) -> list[int]:
        """Run times of the latest `limit` (<= 2) matching jobs, the latest first."""
        with self.reading() as index:
            return index.last_run_times(where, limit)

    def record(self, completions: Iterable[Completion]) -> int:
        return self.knowledge_base.record(self.cluster, completions)


class KnowledgeBase:
    """Completed jobs per cluster: a store, and an index per cluster refreshed from it."""

    def __init__(
        self,
        location: str | None = None,
        *,
        store: CompletionStore | None = None,
        refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
        retry_seconds: float = DEFAULT_RETRY_SECONDS,
        on_fallback: FallbackListener | None = None,
        limits: KnowledgeBaseLimits | None = None,
    ) -> None:
        """`location`: see `store_location.open_store` (OSError if it cannot be opened);
        `store` instead: an open store to use. With `limits.max_clusters`, the clusters
        stored beyond it (the least recently reported) are deleted at once."""
        self.store = store if store is not None else open_store(location)
        self.refresh_seconds = refresh_seconds
        self.retry_seconds = retry_seconds
        self.on_fallback = on_fallback
        self.limits = limits if limits is not None else KnowledgeBaseLimits()
        # In memory, the least recently used first.
        self._histories: OrderedDict[str, ClusterHistory] = OrderedDict()
        # Clusters with rows in the store, the least recently reported first.
        self._reported: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()
        if self.limits.max_clusters is not None:
            self._reported.update(dict.fromkeys(self.store.clusters()))
            self._forget_clusters(self._beyond_max_clusters())

    def record(self, cluster: str, completions: Iterable[Completion]) -> int:
        """Store completions durably in one transaction and index them; returns how many were
        new. Beyond `max_clusters`, the cluster reported least recently is forgotten.

        Raises ValueError, storing nothing, if a completion ends before it starts, and
        StoreUnavailable if the store could not be written within its retries.
        """
        cluster = kept(cluster)
        rows = completion_rows(cluster, completions)
        added = self.store.record(rows)
        if rows:
            with self._lock:
                self._reported[cluster] = None
                self._reported.move_to_end(cluster)
                beyond = self._beyond_max_clusters()
            self._forget_clusters(beyond)
        history = self.history(cluster)
        history.invalidate()
        history.refresh(reading=False)  # index now, so what it forgets leaves the store now
        return added

    def _beyond_max_clusters(self) -> list[str]:
        """Take out of `_reported` the clusters beyond `max_clusters`, the least recently
        reported (called with the lock held)."""
        limit = self.limits.max_clusters
        beyond: list[str] = []
        while limit is not None and len(self._reported) > limit:
            beyond.append(self._reported.popitem(last=False)[0])
        return beyond

    def _forget_clusters(self, clusters: list[str]) -> None:
        """Delete the clusters' rows and their memory (one the store could not delete stays
        first in line, to go at the next report)."""
        for cluster in clusters:
            try:
                self.store.forget_cluster(cluster)
            except StoreUnavailable:
                with self._lock:
                    self._reported[cluster] = None
                    self._reported.move_to_end(cluster, last=False)
                continue
            with self._lock:
                self._histories.pop(cluster, None)

    def history(self, cluster: str) -> ClusterHistory:
        """This knowledge base seen from one cluster (held in memory for at most
        `max_clusters` clusters, the least recently used dropped first)."""
        cluster = kept(cluster)
        with self._lock:
            history = self._histories.get(cluster)
            if history is None:
                history = ClusterHistory(self, cluster, self.refresh_seconds, self.retry_seconds,
                                         self.limits.per_cluster)
                self._histories[cluster] = history
            self._histories.move_to_end(cluster)
            limit = self.limits.max_clusters
            while limit is not None and len(self._histories) > limit:
                self._histories.popitem(last=False)
            return history

    def clusters_in_memory(self) -> int:
        with self._lock:
            return len(self._histories)

    def last_run_times(self, cluster: str, where: HistoryFilter, limit: int) -> list[int]:
        return self.history(cluster).last_run_times(where, limit)

    def count(self, cluster: str) -> int:
        """How many completions are stored for a cluster."""
        return self.store.count(kept(cluster))

    def report_fallback(self, cluster: str) -> None:
        if self.on_fallback is not None:
            self.on_fallback(cluster)

    def close(self) -> None:
        self.store.close()
