"""The knowledge base's SQL, written once for both stores: the statements, the migrations' runner,
and the `CompletionStore` methods over two primitives each store supplies.

`SqlCompletionStore` answers every method of `completion_store.CompletionStore` with the same
statements on SQLite (`store_sqlite`) and PostgreSQL (`store_postgres`); a store brings how it
runs one read (`_read`) and one statement over many parameter rows in one transaction
(`_write`): its connection, lock or pool, retries and errors (StoreUnavailable). The statements
are written with `?` for a parameter (SQLite's style); a dialect puts its own mark there
(none of them contains a `?` of its own).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..domain.caller_scope import CallerScope
from .completion_store import CompletionRow, StoredCompletion
from .migrations import (
    SCHEMA_VERSION_POSTGRES,
    SCHEMA_VERSION_SQLITE,
    Migration,
    pending,
    statements,
)

Params = Sequence[str | int]
Rows = list[tuple[Any, ...]]
Run = Callable[[str, Params], Rows]  # one statement in the caller's transaction: its rows

_COLUMNS = ('identity, cluster, job_id, "user", name, name_prefix, shape, requested_time, '
            'start_time, end_time, run_time')
_SCOPE = "identity = ? AND cluster = ?"


@dataclass(frozen=True, slots=True)
class Dialect:
    """What differs between the two databases: the parameter mark, the `schema_version`
    table's definition and which script of a migration runs."""

    name: str  # "sqlite" or "postgres"
    mark: str
    schema_version: str

    def sql(self, statement: str) -> str:
        return statement.replace("?", self.mark)

    def script(self, migration: Migration) -> str:
        return migration.sqlite if self.name == "sqlite" else migration.postgres


SQLITE = Dialect("sqlite", "?", SCHEMA_VERSION_SQLITE)
POSTGRES = Dialect("postgres", "%s", SCHEMA_VERSION_POSTGRES)


@dataclass(frozen=True, slots=True)
class Statements:
    """Every statement a store runs, in one dialect."""

    insert: str
    rows_since: str
    count: str
    forget: str
    scopes: str
    forget_scope: str
    versions: str
    applied: str
    add_version: str

    @classmethod
    def of(cls, dialect: Dialect) -> Statements:
        sql = dialect.sql
        return cls(
            # Idempotent: the key is (identity, cluster, job id, start time).
            insert=sql(f"INSERT INTO completions ({_COLUMNS}) VALUES ({', '.join('?' * 11)}) "
                       "ON CONFLICT (identity, cluster, job_id, start_time) DO NOTHING"),
            rows_since=sql('SELECT seq, "user", name, name_prefix, shape, end_time, run_time '
                           f"FROM completions WHERE {_SCOPE} AND seq > ? ORDER BY seq"),
            count=sql(f"SELECT COUNT(*) FROM completions WHERE {_SCOPE}"),
            forget=sql(f"DELETE FROM completions WHERE {_SCOPE} AND seq = ?"),
            scopes=("SELECT identity, cluster FROM completions GROUP BY identity, cluster "
                    "ORDER BY MAX(seq)"),
            forget_scope=sql(f"DELETE FROM completions WHERE {_SCOPE}"),
            versions="SELECT version FROM schema_version ORDER BY version",
            applied="SELECT COALESCE(MAX(version), 0) FROM schema_version",
            add_version=sql("INSERT INTO schema_version (version, description, applied_at) "
                            "VALUES (?, ?, ?)"),
        )


def migrate(run: Run, dialect: Dialect, migrations: Sequence[Migration], where: str) -> None:
    """Apply the migrations above the highest recorded one, each statement through `run` (in
    the store's transaction, under its lock); SchemaTooNew if the database is newer."""
    sql = Statements.of(dialect)
    run(dialect.schema_version, ())
    applied = int(run(sql.applied, ())[0][0])
    for migration in pending(applied, migrations, where):
        for statement in statements(dialect.script(migration)):
            run(statement, ())
        run(sql.add_version, (migration.version, migration.description, int(time.time())))


class SqlCompletionStore(ABC):
    """A CompletionStore whose statements are `Statements.of(dialect)`."""

    location: str

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.sql = Statements.of(dialect)

    @abstractmethod
    def _read(self, sql: str, params: Params) -> Rows:
        """The rows of one query; StoreUnavailable when the database cannot answer."""

    @abstractmethod
    def _write(self, sql: str, rows: Sequence[Params], in_commit_order: bool = False) -> int:
        """Run `sql` once per parameter row, in one transaction; the rows it changed. With
        `in_commit_order`, new sequence numbers must grow in commit order (a reader that has
        seen one has seen every one before). StoreUnavailable when it could not commit."""

    def record(self, rows: Sequence[CompletionRow]) -> int:
        if not rows:
            return 0
        return self._write(self.sql.insert, [row.values() for row in rows], in_commit_order=True)

    def rows_since(self, scope: CallerScope, after_seq: int) -> list[StoredCompletion]:
        return [StoredCompletion(*row) for row in self._read(
            self.sql.rows_since, (scope.identity, scope.cluster, after_seq))]

    def count(self, scope: CallerScope) -> int:
        return int(self._read(self.sql.count, (scope.identity, scope.cluster))[0][0])

    def forget(self, scope: CallerScope, seqs: Sequence[int]) -> None:
        self._write(self.sql.forget, [(scope.identity, scope.cluster, seq) for seq in seqs])

    def scopes(self) -> list[CallerScope]:
        return [CallerScope(str(identity), str(cluster))
                for identity, cluster in self._read(self.sql.scopes, ())]

    def forget_scope(self, scope: CallerScope) -> None:
        self._write(self.sql.forget_scope, [(scope.identity, scope.cluster)])

    def schema_versions(self) -> list[int]:
        return [int(version) for (version,) in self._read(self.sql.versions, ())]
