"""The knowledge base as the release before per-identity histories (60884a1) wrote it: its schema
(migration 1, written out here rather than taken from the code) and a few completions, for the
tests that upgrade such a store (tests/server/predictors/test_store_migrations.py for SQLite,
test_postgres_store.py for PostgreSQL).

The completions: two clusters, two users; the row `gone` is deleted after it is stored (as
the limits delete what the index forgets), so the sequence numbers have a gap.
"""

from __future__ import annotations

from hpcdispatch.server.domain.duration_predictor import JobFacts
from hpcdispatch.server.predictors.data_driven import DataDrivenPredictor
from hpcdispatch.server.predictors.knowledge_base import KnowledgeBase
from hpcdispatch.server.predictors.last_two import LastTwoPredictor

SCHEMA_VERSION_ROW = (1, "completions table", 1_700_000_000)

SQLITE_SCHEMA = (
    """CREATE TABLE schema_version (
    version     INTEGER PRIMARY KEY,
    description TEXT    NOT NULL,
    applied_at  INTEGER NOT NULL
)""",
    """CREATE TABLE completions (
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
)""",
    "CREATE INDEX completions_by_user ON completions (cluster, user, end_time)",
    "CREATE INDEX completions_by_profile ON completions (cluster, user, name, shape, end_time)",
    "CREATE INDEX completions_by_user_name ON completions (cluster, user, name, end_time)",
    "CREATE INDEX completions_by_name ON completions (cluster, name, end_time)",
    "CREATE INDEX completions_by_name_prefix ON completions (cluster, name_prefix, end_time)",
)
SQLITE_INSERT = ("INSERT OR IGNORE INTO completions (cluster, job_id, user, name, name_prefix, "
                 "shape, requested_time, start_time, end_time, run_time) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")

POSTGRES_SCHEMA = (
    """CREATE TABLE schema_version (
    version     INTEGER PRIMARY KEY,
    description TEXT    NOT NULL,
    applied_at  BIGINT  NOT NULL
)""",
    """CREATE TABLE completions (
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
)""",
    "CREATE INDEX completions_by_seq ON completions (cluster, seq)",
)
POSTGRES_INSERT = ('INSERT INTO completions (cluster, job_id, "user", name, name_prefix, shape, '
                   "requested_time, start_time, end_time, run_time) "
                   "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
                   "ON CONFLICT (cluster, job_id, start_time) DO NOTHING")

REQUESTED = 3_600
SHAPE = "batch|1|core=4"

# (cluster, job id, user, name, name prefix, shape, requested, start, end, run time), in the
# order they were stored.
ROWS: tuple[tuple[str, str, str, str, str, str, int, int, int, int], ...] = (
    ("east", "1", "alice", "app", "app", SHAPE, REQUESTED, 0, 100, 100),
    ("east", "2", "alice", "app", "app", SHAPE, REQUESTED, 0, 300, 300),
    ("east", "gone", "alice", "app", "app", SHAPE, REQUESTED, 0, 50, 50),
    ("west", "1", "bob", "sim", "sim", SHAPE, REQUESTED, 1_000, 1_700, 700),
    ("east", "3", "bob", "sim_07.sh", "sim", SHAPE, REQUESTED, 2_000, 2_040, 40),
)
GONE = ("east", "gone")  # (cluster, job id) of the row deleted after it was stored

# What the rows kept predict for the identity "": last_two per (cluster, user), and
# data_driven per cluster for carol's job "sim_99" (rule 4, the name prefix "sim").
EXPECTED_LAST_TWO = {("east", "alice"): 200, ("east", "bob"): 40, ("west", "bob"): 700,
                     ("west", "alice"): REQUESTED}
EXPECTED_SIM = {"east": 40, "west": 700}


def job(user: str, name: str = "app") -> JobFacts:
    return JobFacts(user=user, name=name, queue="batch", units=1, unit_request={"core": 4},
                    requested_time=REQUESTED)


Predicted = tuple[dict[tuple[str, str], int], dict[str, int]]  # last_two's, data_driven's


def predicted_from(kb: KnowledgeBase, identity: str = "") -> Predicted:
    """What `identity`'s predictors say of the jobs of EXPECTED_LAST_TWO and EXPECTED_SIM."""
    last_two = {(cluster, user): LastTwoPredictor(kb.history(cluster, identity)).predict(
        job(user, "")) for cluster, user in EXPECTED_LAST_TWO}
    sim = {cluster: DataDrivenPredictor(kb.history(cluster, identity)).predict(
        job("carol", "sim_99")) for cluster in EXPECTED_SIM}
    return last_two, sim
