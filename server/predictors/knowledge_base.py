"""The knowledge base: every completed job the service was told about, per cluster name.

An embedded SQLite store (stdlib `sqlite3`): a file that survives a server restart, or an
in-memory database when no path is given. The schema and its indexes are created on open; a file
runs in WAL mode. A completion is keyed by (cluster, job id, start time), so reporting it again —
a retried RPC, several predictors — stores it once.

One connection serves all threads behind a lock: the service learns from gRPC worker threads
while others predict, and every statement here is a short indexed lookup or a small batch insert.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hpcdispatch.server.predictors.base import Completion
from hpcdispatch.server.predictors.job_keys import name_prefix, request_shape

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS completions (
    cluster        TEXT    NOT NULL,
    job_id         TEXT    NOT NULL,
    user           TEXT    NOT NULL,
    name           TEXT    NOT NULL,
    name_prefix    TEXT    NOT NULL,
    shape          TEXT    NOT NULL,
    requested_time INTEGER NOT NULL,
    start_time     INTEGER NOT NULL,
    end_time       INTEGER NOT NULL,
    run_time       INTEGER NOT NULL,
    PRIMARY KEY (cluster, job_id, start_time)
);
CREATE INDEX IF NOT EXISTS completions_by_user
    ON completions (cluster, user, end_time);
CREATE INDEX IF NOT EXISTS completions_by_profile
    ON completions (cluster, user, name, shape, end_time);
CREATE INDEX IF NOT EXISTS completions_by_user_name
    ON completions (cluster, user, name, end_time);
CREATE INDEX IF NOT EXISTS completions_by_name
    ON completions (cluster, name, end_time);
CREATE INDEX IF NOT EXISTS completions_by_name_prefix
    ON completions (cluster, name_prefix, end_time);
"""

_INSERT = """
INSERT OR IGNORE INTO completions (cluster, job_id, user, name, name_prefix, shape,
                                   requested_time, start_time, end_time, run_time)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""


@dataclass(frozen=True, slots=True)
class HistoryFilter:
    """Which completed jobs to look at; None means any. Fields are the store's columns."""

    user: str | None = None
    name: str | None = None
    name_prefix: str | None = None
    shape: str | None = None

    def where(self) -> tuple[str, list[str]]:
        """The SQL conditions after `cluster = ?` and their parameters."""
        clauses: list[str] = []
        params: list[str] = []
        for column in ("user", "name", "name_prefix", "shape"):
            value = getattr(self, column)
            if value is not None:
                clauses.append(f" AND {column} = ?")
                params.append(value)
        return "".join(clauses), params


class KnowledgeBase:
    """Completed jobs per cluster, in SQLite; `path=None` keeps them in memory."""

    def __init__(self, path: str | None = None) -> None:
        """Open (creating if needed) the store at `path`; OSError if it cannot be opened."""
        self.path = path
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(
                path if path is not None else ":memory:",
                check_same_thread=False,
                isolation_level=None,  # explicit transactions below
            )
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.Error as exc:
            raise OSError(f"cannot open the knowledge base {path}: {exc}") from exc
        if version not in (0, SCHEMA_VERSION):
            self._db.close()
            raise RuntimeError(
                f"knowledge base {path}: schema version {version}, expected {SCHEMA_VERSION}"
            )
        if path is not None:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")  # WAL: durable across process crashes
        self._db.execute("PRAGMA busy_timeout=5000")
        self._db.executescript(_SCHEMA)
        self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")

    def record(self, cluster: str, completions: Iterable[Completion]) -> int:
        """Store completions in one transaction; returns how many were new.

        Raises ValueError, storing nothing, if a completion ends before it starts.
        """
        rows = [_row(cluster, completion) for completion in completions]
        with self._lock:
            before = self._db.total_changes
            self._db.execute("BEGIN")
            try:
                self._db.executemany(_INSERT, rows)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            return self._db.total_changes - before

    def last_run_times(self, cluster: str, where: HistoryFilter, limit: int) -> list[int]:
        """Run times of the latest `limit` matching jobs, the latest (by end time) first.

        Jobs ending at the same second are ordered by when they were recorded, the latest first.
        """
        sql, params = self.query(cluster, where, limit)
        with self._lock:
            return [run_time for (run_time,) in self._db.execute(sql, params)]

    def query(self, cluster: str, where: HistoryFilter, limit: int) -> tuple[str, list[str]]:
        """The SQL and parameters of `last_run_times` (exposed to check the query plan)."""
        conditions, params = where.where()
        sql = (
            "SELECT run_time FROM completions WHERE cluster = ?"
            f"{conditions} ORDER BY end_time DESC, rowid DESC LIMIT {int(limit)}"
        )
        return sql, [cluster, *params]

    def query_plan(self, sql: str, params: Sequence[str]) -> list[str]:
        """SQLite's EXPLAIN QUERY PLAN lines for a query."""
        with self._lock:
            return [row[3] for row in self._db.execute(f"EXPLAIN QUERY PLAN {sql}", params)]

    def count(self, cluster: str) -> int:
        """How many completions are stored for a cluster."""
        with self._lock:
            row = self._db.execute(
                "SELECT COUNT(*) FROM completions WHERE cluster = ?", (cluster,)
            ).fetchone()
        return int(row[0])

    def history(self, cluster: str) -> ClusterHistory:
        """This store seen from one cluster."""
        return ClusterHistory(self, cluster)

    def close(self) -> None:
        with self._lock:
            self._db.close()


@dataclass(frozen=True, slots=True)
class ClusterHistory:
    """The completed jobs of one cluster: what a predictor reads and learns into."""

    store: KnowledgeBase
    cluster: str

    def last_run_times(self, where: HistoryFilter, limit: int) -> list[int]:
        return self.store.last_run_times(self.cluster, where, limit)

    def record(self, completions: Iterable[Completion]) -> int:
        return self.store.record(self.cluster, completions)


def _row(cluster: str, completion: Completion) -> tuple[str | int, ...]:
    if completion.end_time < completion.start_time:
        raise ValueError(
            f"completion of job {completion.job_id!r} ends ({completion.end_time}) "
            f"before it starts ({completion.start_time})"
        )
    facts = completion.facts
    return (
        cluster,
        completion.job_id,
        facts.user,
        facts.name,
        name_prefix(facts.name),
        request_shape(facts),
        facts.requested_time,
        completion.start_time,
        completion.end_time,
        completion.run_time,
    )
