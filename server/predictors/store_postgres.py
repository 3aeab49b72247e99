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
  cluster, job id, start time), so retrying a write whose COMMIT answer was lost is safe.
- Order: writers take a table lock (SHARE ROW EXCLUSIVE: readers are not blocked, writers
  queue), so identity values grow in commit order and `rows_since` never skips a row that
  commits late. Completion reports are small and rare next to decisions, so the queue is short.
- Limits: each replica's knowledge base deletes the rows its index forgets (`forget`) and the
  clusters beyond `max_clusters` (`forget_cluster`, among the clusters stored when it started
  and those it recorded since). Replicas apply the same rule to the rows in the same order,
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

from .completion_store import (
    CompletionRow,
    StoredCompletion,
    StoreUnavailable,
)
from .migrations import (
    MIGRATIONS,
    SCHEMA_VERSION_POSTGRES,
    Migration,
    pending,
    statements,
)

T = TypeVar("T")

_MIGRATION_LOCK = 0x68706364  # pg_advisory_xact_lock key: "hpcd"

_INSERT = """
INSERT INTO completions (cluster, job_id, "user", name, name_prefix, shape,
                         requested_time, start_time, end_time, run_time)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (cluster, job_id, start_time) DO NOTHING
"""

_ROWS_SINCE = """
SELECT seq, "user", name, name_prefix, shape, end_time, run_time FROM completions
WHERE cluster = %s AND seq > %s ORDER BY seq
"""

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


class PostgresStore:
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
            conn.execute(SCHEMA_VERSION_POSTGRES)
            row = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()
            applied = int(row[0]) if row else 0
            for migration in pending(applied, migrations, self.location):
                for statement in statements(migration.postgres):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_version (version, description, applied_at) "
                    "VALUES (%s, %s, %s)",
                    (migration.version, migration.description, int(time.time())),
                )

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

    def schema_versions(self) -> list[int]:
        def read(conn: psycopg.Connection[Any]) -> list[int]:
            return [int(v) for (v,) in conn.execute(
                "SELECT version FROM schema_version ORDER BY version")]
        return self._retrying(read, self.read_seconds)

    def record(self, rows: Sequence[CompletionRow]) -> int:
        values = [row.values() for row in rows]

        def write(conn: psycopg.Connection[Any]) -> int:
            with conn.transaction(), conn.cursor() as cursor:
                cursor.execute("LOCK TABLE completions IN SHARE ROW EXCLUSIVE MODE")
                if not values:
                    return 0
                cursor.executemany(_INSERT, values)
                return max(0, cursor.rowcount)

        return self._retrying(write, self.write_seconds)

    def rows_since(self, cluster: str, after_seq: int) -> list[StoredCompletion]:
        def read(conn: psycopg.Connection[Any]) -> list[StoredCompletion]:
            return [StoredCompletion(*row)
                    for row in conn.execute(_ROWS_SINCE, (cluster, after_seq))]
        return self._retrying(read, self.read_seconds)

    def count(self, cluster: str) -> int:
        def read(conn: psycopg.Connection[Any]) -> int:
            row = conn.execute(
                "SELECT COUNT(*) FROM completions WHERE cluster = %s", (cluster,)).fetchone()
            return int(row[0]) if row else 0
        return self._retrying(read, self.read_seconds)

    def forget(self, cluster: str, seqs: Sequence[int]) -> None:
        def delete(conn: psycopg.Connection[Any]) -> None:
            conn.execute("DELETE FROM completions WHERE cluster = %s AND seq = ANY(%s)",
                         (cluster, list(seqs)))
        self._retrying(delete, self.write_seconds)

    def clusters(self) -> list[str]:
        def read(conn: psycopg.Connection[Any]) -> list[str]:
            return [str(c) for (c,) in conn.execute(
                "SELECT cluster FROM completions GROUP BY cluster ORDER BY MAX(seq)")]
        return self._retrying(read, self.read_seconds)

    def forget_cluster(self, cluster: str) -> None:
        def delete(conn: psycopg.Connection[Any]) -> None:
            conn.execute("DELETE FROM completions WHERE cluster = %s", (cluster,))
        self._retrying(delete, self.write_seconds)

    def close(self) -> None:
        self._pool.close(timeout=5.0)
