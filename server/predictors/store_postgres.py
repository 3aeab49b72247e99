"""The shared store: a PostgreSQL server (psycopg 3 and a connection pool), for replicas.

Every replica writes its completions here and reads everyone's, so the predictors of all
replicas learn from the same history. Chosen by a `predictor_store` URL
(`postgresql://user@host:5432/db`; the password best comes from `PGPASSWORD`, which libpq
reads, rather than the URL).

- Open: the pool connects (OSError if the server cannot be reached within `startup_seconds`,
  so a replica does not run without its shared history), then the numbered migrations are
  applied under an advisory lock, so replicas starting together apply each once.
- Lost connections: pooled connections are checked on checkout and broken ones replaced;
  a call that still fails with a connection error is retried, with backoff, within its budget
  (`write_seconds` for `record`, `read_seconds` for reads), then raises StoreUnavailable.
- Durability: `record` returns only after COMMIT (synchronous commit, PostgreSQL's default),
  so an acknowledged completion survives a server restart. Inserts are idempotent (the key is
  identity, cluster, job id, start time), so retrying a write whose COMMIT answer was lost is
  safe.
- Order: writers take a table lock (SHARE ROW EXCLUSIVE: readers are not blocked, writers
  queue), so identity values grow in commit order and `rows_since` never skips a row that
  commits late. Completion reports are small and rare next to decisions, so the queue is short.
- Statements: the ones both stores run (`store_sql`).
- Limits: each replica's knowledge base deletes the rows its index forgets (`forget`) and the
  scopes beyond its limits (`forget_scope`, among the scopes stored when it started and those it
  recorded since). Replicas apply the same rule to the rows in the same order,
  so they forget the same ones; a row another replica deleted before this one read it is one
  this one would have forgotten too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool

from .completion_store import StoreUnavailable
from .migrations import MIGRATIONS, Migration
from .store_sql import POSTGRES, Params, Rows, SqlCompletionStore, migrate

T = TypeVar("T")

_MIGRATION_LOCK = 0x68706364  # pg_advisory_xact_lock key: "hpcd"

# What a lost or refused connection raises (psycopg_pool.PoolTimeout is an OperationalError).
_CONNECTION_ERRORS = (psycopg.OperationalError, psycopg.InterfaceError)


def redacted(url: str) -> str:
    """The URL without its password: postgresql://user@host:port/db."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "postgresql://(unparsable URL)"
    user = f"{parts['user']}@" if parts.get("user") else ""
    port = f":{parts['port']}" if parts.get("port") else ""
    return f"postgresql://{user}{parts.get('host', '')}{port}/{parts.get('dbname', '')}"


def _rows(conn: psycopg.Connection[Any], sql: str, params: Params) -> Rows:
    """The rows of one statement (none for a statement that returns none)."""
    cursor = conn.execute(sql, params)
    return cursor.fetchall() if cursor.description is not None else []


class PostgresStore(SqlCompletionStore):
    """Completed jobs in a PostgreSQL database shared by every replica."""

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 4,
        connect_seconds: int = 3,
        startup_seconds: float = 15.0,
        write_seconds: float = 10.0,
        read_seconds: float = 1.0,
        migrations: Sequence[Migration] = MIGRATIONS,
    ) -> None:
        super().__init__(POSTGRES)
        self.location = redacted(url)
        self.write_seconds = write_seconds
        self.read_seconds = read_seconds
        self._pool: ConnectionPool[psycopg.Connection[tuple[Any, ...]]] = ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            open=False,
            kwargs={"autocommit": True, "connect_timeout": connect_seconds,
                    "application_name": "hpcdispatch"},
            check=ConnectionPool.check_connection,
            name="hpcdispatch-knowledge-base",
        )
        try:
            self._pool.open(wait=True, timeout=startup_seconds)
        except _CONNECTION_ERRORS as exc:
            self._pool.close()
            raise OSError(f"cannot reach the knowledge base {self.location}: {exc}") from exc
        try:
            self._retrying(lambda conn: self._migrate(conn, migrations), startup_seconds)
        except BaseException:
            self._pool.close()
            raise

    def _migrate(self, conn: psycopg.Connection[Any], migrations: Sequence[Migration]) -> None:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            migrate(lambda sql, params: _rows(conn, sql, params), POSTGRES, migrations,
                    self.location)

    def _retrying(self, work: Callable[[psycopg.Connection[Any]], T], budget: float) -> T:
        """`work` on a pooled connection; connection errors are retried, with backoff, until
        `budget` seconds have passed, then StoreUnavailable."""
        deadline = time.monotonic() + budget
        delay = 0.05
        while True:
            left = deadline - time.monotonic()
            try:
                with self._pool.connection(timeout=max(0.05, left)) as conn:
                    return work(conn)
            except _CONNECTION_ERRORS as exc:
                if time.monotonic() + delay >= deadline:
                    raise StoreUnavailable(
                        f"knowledge base {self.location} unavailable: {exc}") from exc
            time.sleep(delay)
            delay = min(delay * 2, 1.0)

    def _read(self, sql: str, params: Params) -> Rows:
        return self._retrying(lambda conn: _rows(conn, sql, params), self.read_seconds)

    def _write(self, sql: str, rows: Sequence[Params], in_commit_order: bool = False) -> int:
        def write(conn: psycopg.Connection[Any]) -> int:
            with conn.transaction(), conn.cursor() as cursor:
                if in_commit_order:  # writers queue; readers are not blocked
                    cursor.execute("LOCK TABLE completions IN SHARE ROW EXCLUSIVE MODE")
                cursor.executemany(sql, rows)
                return max(0, cursor.rowcount)

        return self._retrying(write, self.write_seconds)

    def close(self) -> None:
        self._pool.close(timeout=5.0)
