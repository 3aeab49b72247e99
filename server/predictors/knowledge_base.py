"""The knowledge base: the completed jobs the service was told about, per caller scope, within
its limits.

A scope is the client identity that reported the completions (its mTLS certificate's names, as
sessions are owned; "" without client certificates, where every caller is one identity) and the
cluster name it gave (`domain.caller_scope.CallerScope`). A scope's predictions read its own
completions only: no caller can change what another's predictors learnt, nor push its history
out. Completions are written to a store (`store_location`: SQLite, embedded, or PostgreSQL,
shared by replicas) and read by the predictors from an in-memory index per scope
(`history_index`).
The index is refreshed from the store with one query for the rows recorded since its last one:
before a read when it is older than `refresh_seconds` (so another replica's completions are
seen within that), and at once when this process records (so a report is indexed, and what the
index forgets deleted from the store, before it is acknowledged).

Limits (`KnowledgeBaseLimits`, the `knowledge_base_*` configuration keys): per scope, at most
`max_completions` completions and `max_bytes` of their text are kept; beyond, those no
prediction can read any more go first, then the oldest (`history_index`), and what the index
forgets is deleted from the store. Each identity keeps a history for at most `max_clusters`
clusters: when it reports for one more, its own cluster whose latest report is oldest is
forgotten, its rows deleted; at most `max_identities` identities keep a history (one more
forgets every cluster of the identity whose latest report is oldest). As many scopes' indexes
and predictors are held in memory, under the same two bounds (the least recently used is
dropped, and read back from the store when asked for again), so one identity's decisions never
drop another's index either (`scope_book`).

When the store cannot be read, the predictors go on from what the index already holds (for a
scope never read, that is nothing: every job gets its requested time), `on_fallback(cluster)`
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
from dataclasses import dataclass

from ..domain.caller_scope import CallerScope
from ..domain.duration_predictor import Completion, DurationPredictor
from .completion_store import (
    CompletionStore,
    StoreUnavailable,
    completion_rows,
)
from .history_index import HistoryFilter, HistoryIndex, IndexLimits
from .job_keys import kept
from .scope_book import Dropped, ScopeBook
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

    max_completions: int | None = None  # per scope, kept completions
    max_bytes: int | None = None  # per scope, UTF-8 bytes of their text
    max_clusters: int | None = None  # per identity, clusters with a history (and in memory)
    max_identities: int | None = None  # identities with a history (and in memory)

    @property
    def per_scope(self) -> IndexLimits:
        return IndexLimits(self.max_completions, self.max_bytes)


def scope_of(cluster: str, identity: str = "") -> CallerScope:
    """The scope (identity, cluster) in the form the knowledge base keeps its texts."""
    return CallerScope(kept(identity), kept(cluster))


class ClusterHistory:
    """The completed jobs of one cluster as one client identity reported them (its scope): what
    that caller's predictors read and learn into."""

    def __init__(
        self, knowledge_base: KnowledgeBase, scope: CallerScope, refresh_seconds: float,
        retry_seconds: float, limits: IndexLimits | None = None,
    ) -> None:
        self.knowledge_base = knowledge_base
        self.scope = scope
        self.cluster = scope.cluster
        self.identity = scope.identity
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
        """The scope's predictor of this kind, made once (it lives as long as this history)."""
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
                rows = self.knowledge_base.store.rows_since(self.scope, self._index.watermark)
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
            self.knowledge_base.store.forget(self.scope, self._owed)
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
        return self.knowledge_base.record(self.cluster, completions, self.identity)


class KnowledgeBase:
    """Completed jobs per scope: a store, and an index per scope refreshed from it."""

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
        `store` instead: an open store to use. The scopes stored beyond the cluster and
        identity bounds (the least recently reported) are deleted at once."""
        self.store = store if store is not None else open_store(location)
        self.refresh_seconds = refresh_seconds
        self.retry_seconds = retry_seconds
        self.on_fallback = on_fallback
        self.limits = limits if limits is not None else KnowledgeBaseLimits()
        # In memory, the least recently used first.
        bounds = (self.limits.max_clusters, self.limits.max_identities)
        self._histories: ScopeBook[ClusterHistory] = ScopeBook(*bounds)
        # Scopes with rows in the store, the least recently reported first.
        self._reported: ScopeBook[None] = ScopeBook(*bounds)
        self._lock = threading.Lock()
        if self.limits.max_clusters is not None or self.limits.max_identities is not None:
            beyond: Dropped[None] = []
            for scope in self.store.scopes():
                beyond += self._reported.put(scope, None)
            self._forget_scopes(beyond)

    def record(self, cluster: str, completions: Iterable[Completion], identity: str = "") -> int:
        """Store completions `identity` reported for `cluster` durably in one transaction and
        index them; returns how many were new. Beyond the bounds, the identity's cluster
        reported least recently is forgotten (and, beyond `max_identities`, the identity
        reported least recently).

        Raises ValueError, storing nothing, if a completion ends before it starts, and
        StoreUnavailable if the store could not be written within its retries.
        """
        scope = scope_of(cluster, identity)
        rows = completion_rows(cluster, completions, identity)
        added = self.store.record(rows)
        if rows:
            with self._lock:
                beyond = self._reported.put(scope, None)
            self._forget_scopes(beyond)
        history = self._history(scope)
        history.invalidate()
        history.refresh(reading=False)  # index now, so what it forgets leaves the store now
        return added

    def _forget_scopes(self, scopes: Dropped[None]) -> None:
        """Delete the scopes' rows and their memory (one the store could not delete stays
        first in line, to go at the next report)."""
        for scope, _ in scopes:
            try:
                self.store.forget_scope(scope)
            except StoreUnavailable:
                with self._lock:
                    self._reported.put_first(scope, None)
                continue
            with self._lock:
                self._histories.pop(scope)

    def history(self, cluster: str, identity: str = "") -> ClusterHistory:
        """This knowledge base seen from one scope: what `identity` reported for `cluster`
        (held in memory within the cluster and identity bounds, the least recently used
        dropped first)."""
        return self._history(scope_of(cluster, identity))

    def _history(self, scope: CallerScope) -> ClusterHistory:
        with self._lock:
            history = self._histories.get(scope)
            if history is None:
                history = ClusterHistory(self, scope, self.refresh_seconds, self.retry_seconds,
                                         self.limits.per_scope)
            self._histories.put(scope, history)  # the latest used (beyond: dropped)
            return history

    def scopes_in_memory(self) -> int:
        with self._lock:
            return len(self._histories)

    def last_run_times(self, cluster: str, where: HistoryFilter, limit: int,
                       identity: str = "") -> list[int]:
        return self.history(cluster, identity).last_run_times(where, limit)

    def count(self, cluster: str, identity: str = "") -> int:
        """How many completions are stored for a scope."""
        return self.store.count(scope_of(cluster, identity))

    def report_fallback(self, cluster: str) -> None:
        if self.on_fallback is not None:
            self.on_fallback(cluster)

    def close(self) -> None:
        self.store.close()
