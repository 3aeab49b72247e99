"""Which store the `predictor_store` setting names: a PostgreSQL URL, an SQLite file, or none."""

from __future__ import annotations

from .completion_store import CompletionStore
from .store_sqlite import SqliteStore


def is_postgres_url(location: str) -> bool:
    return location.startswith(("postgresql://", "postgres://"))


def open_store(location: str | None) -> CompletionStore:
    """`postgresql://…` (or `postgres://…`): the shared PostgreSQL store; any other string: an
    SQLite file at that path; None: SQLite in memory. OSError if it cannot be opened."""
    if location is not None and is_postgres_url(location):
        # psycopg only where PostgreSQL is used (its import costs about 0.3 s).
        from .store_postgres import PostgresStore

        return PostgresStore(location)
    return SqliteStore(location)
