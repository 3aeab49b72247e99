"""Numbered schema migrations of the knowledge base, the same numbers on SQLite and PostgreSQL.

Each store keeps a `schema_version` table (version, description, applied_at in Unix seconds),
and at open applies, in one transaction and under a lock (so replicas starting together apply
each once), every migration whose number is above the highest recorded. A database whose
highest version is above the newest migration known here was written by a newer release and
is refused rather than guessed at.

To change the schema, append a migration; never edit one that has shipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    description: str
    sqlite: str  # statements separated by ";"
    postgres: str


class SchemaTooNew(RuntimeError):
    """The database has a schema version this release does not know."""


SCHEMA_VERSION_SQLITE = """
CREATE TABLE IF NOT EXISTS schema_version (
    version     INTEGER PRIMARY KEY,
    description TEXT    NOT NULL,
    applied_at  INTEGER NOT NULL
)
"""

SCHEMA_VERSION_POSTGRES = """
CREATE TABLE IF NOT EXISTS schema_version (
    version     INTEGER PRIMARY KEY,
    description TEXT    NOT NULL,
    applied_at  BIGINT  NOT NULL
)
"""

# 1: the completions table. On SQLite it is the table (and per-rule indexes) of the releases
# before numbered migrations (PRAGMA user_version 1), so an existing file adopts it as is; the
# implicit rowid is the sequence number. PostgreSQL has an identity column for it, and "user" is
# quoted there (a reserved word).
_COMPLETIONS_SQLITE = """
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
    ON completions (cluster, name_prefix, end_time)
"""

_COMPLETIONS_POSTGRES = """
CREATE TABLE IF NOT EXISTS completions (
    seq            BIGINT  GENERATED ALWAYS AS IDENTITY,
    cluster        TEXT    NOT NULL,
    job_id         TEXT    NOT NULL,
    "user"         TEXT    NOT NULL,
    name           TEXT    NOT NULL,
    name_prefix    TEXT    NOT NULL,
    shape          TEXT    NOT NULL,
    requested_time BIGINT  NOT NULL,
    start_time     BIGINT  NOT NULL,
    end_time       BIGINT  NOT NULL,
    run_time       BIGINT  NOT NULL,
    PRIMARY KEY (cluster, job_id, start_time)
);
CREATE INDEX IF NOT EXISTS completions_by_seq ON completions (cluster, seq)
"""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "completions table", _COMPLETIONS_SQLITE, _COMPLETIONS_POSTGRES),
)


def pending(applied: int, migrations: Sequence[Migration], where: str) -> list[Migration]:
    """The migrations above version `applied`, in order; SchemaTooNew if `applied` is above
    the newest one known. `where` names the database in the error."""
    newest = max((m.version for m in migrations), default=0)
    if applied > newest:
        raise SchemaTooNew(
            f"knowledge base {where}: schema version {applied}, this release knows up to "
            f"{newest} (written by a newer release?)"
        )
    return sorted((m for m in migrations if m.version > applied), key=lambda m: m.version)


def statements(script: str) -> list[str]:
    """A migration's statements, one by one (none of them contains a ';' of its own)."""
    return [s.strip() for s in script.split(";") if s.strip()]
