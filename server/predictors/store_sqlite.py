"""The embedded store: an SQLite file (stdlib `sqlite3`), or memory when no path is given.

A file runs in WAL mode and survives a server restart; several processes on one host may share
it (SQLite serialises the writers, so rowids grow in commit order and serve as the sequence
numbers). One connection serves all threads behind a lock. The schema comes from the numbered
migrations (`migrations`), applied at open under `BEGIN IMMEDIATE`. The knowledge base deletes
the rows its index forgets (`forget`, `forget_cluster`); a file keeps its size and reuses the
freed pages.

`last_run_times` is the direct per-filter query of the releases that asked the store once per
job and rule; the predictors no longer use it (they read `history_index`), the benchmark
`benchmarks.decision_cost.predictor_cost` does, to measure that way against the index.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Sequence

from .completion_store import (
    CompletionRow,
    StoredCompletion,
    StoreUnavailable,
)
from .history_index import HistoryFilter
from .migrations import (
    MIGRATIONS,
    SCHEMA_VERSION_SQLITE,
    Migration,
    pending,
    statements,
)

_INSERT = """
INSERT OR IGNORE INTO completions (cluster, job_id, user, name, name_prefix, shape,
                                   requested_time, start_time, end_time, run_time)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""

_ROWS_SINCE = """
SELECT rowid, user, name, name_prefix, shape, end_time, run_time FROM completions
WHERE cluster = ? AND rowid > ? ORDER BY rowid
"""


class SqliteStore:
    """Completed jobs in SQLite; `path=None` keeps them in memory (lost with the process)."""

    def __init__(self, path: str | None = None,
                 migrations: Sequence[Migration] = MIGRATIONS) -> None:
        """Open (creating if needed) the file at `path` and migrate it; OSError if it cannot
        be opened, migrations.SchemaTooNew if a newer release wrote it."""
        self.path = path
        self.location = path if path is not None else ":memory:"
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(
                self.location, check_same_thread=False,
                isolation_level=None,  # explicit transactions below
            )
            if path is not None:
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")  # WAL: durable across crashes
            self._db.execute("PRAGMA busy_timeout=5000")
        except sqlite3.Error as exc:
            raise OSError(f"cannot open the knowledge base {path}: {exc}") from exc
        try:
            self._migrate(migrations)
        except BaseException:
            self._db.close()
            raise

    def _migrate(self, migrations: Sequence[Migration]) -> None:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute(SCHEMA_VERSION_SQLITE)
            applied = db.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version")
            for migration in pending(applied.fetchone()[0], migrations, self.location):
                for statement in statements(migration.sqlite):
                    db.execute(statement)
                db.execute(
                    "INSERT INTO schema_version (version, description, applied_at) "
                    "VALUES (?, ?, ?)",
                    (migration.version, migration.description, int(time.time())),
                )
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def schema_versions(self) -> list[int]:
        with self._lock:
            return [v for (v,) in self._db.execute(
                "SELECT version FROM schema_version ORDER BY version")]

    def record(self, rows: Sequence[CompletionRow]) -> int:
        return self._write(_INSERT, [row.values() for row in rows])

    def rows_since(self, cluster: str, after_seq: int) -> list[StoredCompletion]:
        try:
            with self._lock:
                return [StoredCompletion(*row)
                        for row in self._db.execute(_ROWS_SINCE, (cluster, after_seq))]
        except sqlite3.OperationalError as exc:
            raise StoreUnavailable(f"knowledge base {self.location}: {exc}") from exc

    def count(self, cluster: str) -> int:
        with self._lock:
            row = self._db.execute(
                "SELECT COUNT(*) FROM completions WHERE cluster = ?", (cluster,)
            ).fetchone()
        return int(row[0])

    def forget(self, cluster: str, seqs: Sequence[int]) -> None:
        self._write("DELETE FROM completions WHERE cluster = ? AND rowid = ?",
                    [(cluster, seq) for seq in seqs])

    def clusters(self) -> list[str]:
        with self._lock:
            return [cluster for (cluster,) in self._db.execute(
                "SELECT cluster FROM completions GROUP BY cluster ORDER BY MAX(rowid)")]

    def forget_cluster(self, cluster: str) -> None:
        self._write("DELETE FROM completions WHERE cluster = ?", [(cluster,)])

    def _write(self, sql: str, params: Sequence[tuple[str | int, ...]]) -> int:
        """One statement over every parameter row, in one transaction; returns the rows it
        changed."""
        with self._lock:
            before = self._db.total_changes
            try:
                self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:  # locked past busy_timeout, I/O error
                raise StoreUnavailable(f"knowledge base {self.location}: {exc}") from exc
            try:
                self._db.executemany(sql, params)
                self._db.execute("COMMIT")
            except BaseException as exc:
                self._db.execute("ROLLBACK")
                if isinstance(exc, sqlite3.OperationalError):
                    raise StoreUnavailable(f"knowledge base {self.location}: {exc}") from exc
                raise
            return self._db.total_changes - before

    def last_run_times(self, cluster: str, where: HistoryFilter, limit: int) -> list[int]:
        """Run times of the latest `limit` matching jobs, the latest (by end time, then by
        recording) first: one query (the per-job way, kept for the benchmark)."""
        sql, params = self.query(cluster, where, limit)
        with self._lock:
            return [run_time for (run_time,) in self._db.execute(sql, params)]

    def query(self, cluster: str, where: HistoryFilter, limit: int) -> tuple[str, list[str]]:
        """The SQL and parameters of `last_run_times` (exposed to check the query plan)."""
        clauses: list[str] = []
        params: list[str] = [cluster]
        for column, value in zip(("user", "name", "name_prefix", "shape"), where.key,
                                 strict=True):
            if value is not None:
                clauses.append(f" AND {column} = ?")
                params.append(value)
        sql = (
            "SELECT run_time FROM completions WHERE cluster = ?"
            f"{''.join(clauses)} ORDER BY end_time DESC, rowid DESC LIMIT {int(limit)}"
        )
        return sql, params

    def query_plan(self, sql: str, params: Sequence[str]) -> list[str]:
        """SQLite's EXPLAIN QUERY PLAN lines for a query."""
        with self._lock:
            return [row[3] for row in self._db.execute(f"EXPLAIN QUERY PLAN {sql}", params)]

    def close(self) -> None:
        with self._lock:
            self._db.close()
