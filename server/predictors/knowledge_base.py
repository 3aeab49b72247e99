"""The knowledge base: every completed job the service was told about, per cluster name.

Completions are written to a store (`store_location`: SQLite, embedded, or PostgreSQL, shared
by replicas) and read by the predictors from an in-memory index per cluster (`history_index`).
The index is refreshed from the store with one query for the rows recorded since its last one:
before a read when it is older than `refresh_seconds` (so another replica's completions are
seen within that), or at once after this process recorded something.

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
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from .base import Completion
from .completion_store import (
    CompletionStore,
    StoreUnavailable,
    completion_rows,
)
from .history_index import HistoryFilter, HistoryIndex
from .store_location import open_store

DEFAULT_REFRESH_SECONDS = 1.0
DEFAULT_RETRY_SECONDS = 5.0

FallbackListener = Callable[[str], None]  # cluster name


class ClusterHistory:
    """The completed jobs of one cluster: what a predictor reads and learns into."""

    def __init__(
        self, knowledge_base: KnowledgeBase, cluster: str, refresh_seconds: float,
        retry_seconds: float,
    ) -> None:
        self.knowledge_base = knowledge_base
        self.cluster = cluster
        self.refresh_seconds = refresh_seconds
        self.retry_seconds = retry_seconds
        self._index = HistoryIndex()
        self._lock = threading.Lock()  # guards the index
        self._refreshing = threading.Lock()  # one reader of the store at a time
        self._stale = True  # this process recorded something the index has not read yet
        self._refreshed_at = -math.inf
        self._failed_at: float | None = None

    def invalidate(self) -> None:
        """The next read refreshes the index first (called after this process recorded)."""
        self._stale = True

    def refresh(self) -> bool:
        """Bring the index up to date if it is due; False if the store could not be read (the
        index stays as it was, and the fallback is reported)."""
        now = time.monotonic()
        if self._failed_at is not None and now - self._failed_at < self.retry_seconds:
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
                self.knowledge_base.report_fallback(self.cluster)
                return False
            with self._lock:
                self._index.add(rows)
            self._refreshed_at = now
            self._failed_at = None
            return True
        finally:
            self._refreshing.release()

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
    ) -> None:
        """`location`: see `store_location.open_store` (OSError if it cannot be opened);
        `store` instead: an open store to use."""
        self.store = store if store is not None else open_store(location)
        self.refresh_seconds = refresh_seconds
        self.retry_seconds = retry_seconds
        self.on_fallback = on_fallback
        self._histories: dict[str, ClusterHistory] = {}
        self._lock = threading.Lock()

    def record(self, cluster: str, completions: Iterable[Completion]) -> int:
        """Store completions durably in one transaction; returns how many were new.

        Raises ValueError, storing nothing, if a completion ends before it starts, and
        StoreUnavailable if the store could not be written within its retries.
        """
        rows = completion_rows(cluster, completions)
        added = self.store.record(rows)
        self.history(cluster).invalidate()
        return added

    def history(self, cluster: str) -> ClusterHistory:
        """This knowledge base seen from one cluster."""
        with self._lock:
            history = self._histories.get(cluster)
            if history is None:
                history = ClusterHistory(self, cluster, self.refresh_seconds, self.retry_seconds)
                self._histories[cluster] = history
            return history

    def last_run_times(self, cluster: str, where: HistoryFilter, limit: int) -> list[int]:
        return self.history(cluster).last_run_times(where, limit)

    def count(self, cluster: str) -> int:
        """How many completions are stored for a cluster."""
        return self.store.count(cluster)

    def report_fallback(self, cluster: str) -> None:
        if self.on_fallback is not None:
            self.on_fallback(cluster)

    def close(self) -> None:
        self.store.close()
