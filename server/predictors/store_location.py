"""Which store the `predictor_store` setting names: a PostgreSQL URL, an SQLite file, or none."""

from __future__ import annotations

from .completion_store import CompletionStore
from .store_postgres import PostgresStore, is_postgres_url
from .store_sqlite import SqliteStore


def open_store(location: str | None) -> CompletionStore:
    """`postgresql://…` (or `postgres://…`): the shared PostgreSQL store; any other string: an
    SQLite file at that path; None: SQLite in memory. OSError if it cannot be opened."""
    if location is not None and is_postgres_url(location):
        return PostgresStore(location)
    return SqliteStore(location)
