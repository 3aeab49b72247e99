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

# 2: the history per caller scope (issue #43): an `identity` column before the cluster in the
# key and every index (the client identity that reported the completion, as sessions are owned:
# "" without client certificates). The rows stored before it belong to "", the identity of
# every caller without a client certificate. SQLite cannot change a primary key in place: the
# table is copied into a new one, the rowids kept as `seq` (so a refresh's watermark stays
# valid), now AUTOINCREMENT so that a deleted last row's number is never given again (a
# reader whose watermark reached it would skip the new row). PostgreSQL changes the key in
# place; its `seq` values stay.
_BY_IDENTITY_SQLITE = """
CREATE TABLE completions_by_identity (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    identity       TEXT    NOT NULL,
    cluster        TEXT    NOT NULL,
    job_id         TEXT    NOT NULL,
    "user"         TEXT    NOT NULL,
    name           TEXT    NOT NULL,
    name_prefix    TEXT    NOT NULL,
    shape          TEXT    NOT NULL,
    requested_time INTEGER NOT NULL,
    start_time     INTEGER NOT NULL,
    end_time       INTEGER NOT NULL,
    run_time       INTEGER NOT NULL,
    UNIQUE (identity, cluster, job_id, start_time)
);
INSERT INTO completions_by_identity (seq, identity, cluster, job_id, "user", name, name_prefix,
                                     shape, requested_time, start_time, end_time, run_time)
    SELECT rowid, '', cluster, job_id, "user", name, name_prefix, shape, requested_time,
           start_time, end_time, run_time
    FROM completions ORDER BY rowid;
DROP TABLE completions;
ALTER TABLE completions_by_identity RENAME TO completions;
CREATE INDEX completions_by_scope ON completions (identity, cluster);
CREATE INDEX completions_by_user ON completions (identity, cluster, "user", end_time);
CREATE INDEX completions_by_profile
    ON completions (identity, cluster, "user", name, shape, end_time);
CREATE INDEX completions_by_user_name ON completions (identity, cluster, "user", name, end_time);
CREATE INDEX completions_by_name ON completions (identity, cluster, name, end_time);
CREATE INDEX completions_by_name_prefix ON completions (identity, cluster, name_prefix, end_time)
"""

_BY_IDENTITY_POSTGRES = """
ALTER TABLE completions ADD COLUMN identity TEXT NOT NULL DEFAULT '';
ALTER TABLE completions ALTER COLUMN identity DROP DEFAULT;
ALTER TABLE completions DROP CONSTRAINT completions_pkey;
ALTER TABLE completions ADD PRIMARY KEY (identity, cluster, job_id, start_time);
DROP INDEX completions_by_seq;
CREATE INDEX completions_by_scope ON completions (identity, cluster, seq)
"""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "completions table", _COMPLETIONS_SQLITE, _COMPLETIONS_POSTGRES),
    Migration(2, "completions per client identity", _BY_IDENTITY_SQLITE, _BY_IDENTITY_POSTGRES),
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
