"""The embedded store: an SQLite file (stdlib `sqlite3`), or memory when no path is given.

A file runs in WAL mode and survives a server restart; several processes on one host may share
it (SQLite serialises the writers, and `seq`, an AUTOINCREMENT rowid, grows in commit order and
is never given twice). One connection serves all threads behind a lock. The statements are the
ones both stores run (`store_sql`); the schema comes from the numbered migrations
(`migrations`), applied at open under `BEGIN IMMEDIATE`. The knowledge base deletes the rows its
index forgets (`forget`, `forget_scope`); a file keeps its size and reuses the freed pages.

`last_run_times` is the direct per-filter query of the releases that asked the store once per
job and rule; the predictors no longer use it (they read `history_index`), the benchmark
`benchmarks.decision_cost.predictor_cost` does, to measure that way against the index.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence

from .completion_store import StoreUnavailable
from .history_index import HistoryFilter
from .migrations import MIGRATIONS, Migration
from .store_sql import SQLITE, Params, Rows, SqlCompletionStore, migrate


class SqliteStore(SqlCompletionStore):
    """Completed jobs in SQLite; `path=None` keeps them in memory (lost with the process)."""

    def __init__(self, path: str | None = None,
                 migrations: Sequence[Migration] = MIGRATIONS) -> None:
        """Open (creating if needed) the file at `path` and migrate it; OSError if it cannot
        be opened, migrations.SchemaTooNew if a newer release wrote it."""
        super().__init__(SQLITE)
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
            migrate(lambda sql, params: db.execute(sql, params).fetchall(), SQLITE, migrations,
                    self.location)
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    def _read(self, sql: str, params: Params) -> Rows:
        try:
            with self._lock:
                return self._db.execute(sql, params).fetchall()
        except sqlite3.OperationalError as exc:  # locked past busy_timeout, I/O error
            raise StoreUnavailable(f"knowledge base {self.location}: {exc}") from exc

    def _write(self, sql: str, rows: Sequence[Params], in_commit_order: bool = False) -> int:
        # BEGIN IMMEDIATE serialises the writers: sequence numbers grow in commit order.
        with self._lock:
            before = self._db.total_changes
            try:
                self._db.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:  # locked past busy_timeout, I/O error
                raise StoreUnavailable(f"knowledge base {self.location}: {exc}") from exc
            try:
                self._db.executemany(sql, rows)
                self._db.execute("COMMIT")
            except BaseException as exc:
                self._db.execute("ROLLBACK")
                if isinstance(exc, sqlite3.OperationalError):
                    raise StoreUnavailable(f"knowledge base {self.location}: {exc}") from exc
                raise
            return self._db.total_changes - before

    def last_run_times(self, cluster: str, where: HistoryFilter, limit: int,
                       identity: str = "") -> list[int]:
        """Run times of the latest `limit` matching jobs of the scope (identity, cluster), the
        latest (by end time, then by recording) first: one query (the per-job way, kept for
        the benchmark)."""
        sql, params = self.query(cluster, where, limit, identity)
        return [run_time for (run_time,) in self._read(sql, params)]

    def query(self, cluster: str, where: HistoryFilter, limit: int,
              identity: str = "") -> tuple[str, list[str]]:
        """The SQL and parameters of `last_run_times` (exposed to check the query plan)."""
        clauses: list[str] = []
        params: list[str] = [identity, cluster]
        for column, value in zip(('"user"', "name", "name_prefix", "shape"), where.key,
                                 strict=True):
            if value is not None:
                clauses.append(f" AND {column} = ?")
                params.append(value)
        sql = (
            "SELECT run_time FROM completions WHERE identity = ? AND cluster = ?"
            f"{''.join(clauses)} ORDER BY end_time DESC, seq DESC LIMIT {int(limit)}"
        )
        return sql, params

    def query_plan(self, sql: str, params: Sequence[str]) -> list[str]:
        """SQLite's EXPLAIN QUERY PLAN lines for a query."""
        return [str(row[3]) for row in self._read(f"EXPLAIN QUERY PLAN {sql}", params)]

    def close(self) -> None:
        with self._lock:
            self._db.close()
