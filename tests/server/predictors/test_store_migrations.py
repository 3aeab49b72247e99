"""Issue #43 item 2: an SQLite knowledge base written by the release before per-identity histories
is upgraded in place (migration 2), keeping every row, its sequence number and what it predicts,
now in the scope of the identity "" (every caller without a client certificate); opening it
again changes nothing. The PostgreSQL upgrade: tests/server/predictors/test_postgres_store.py.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hpcdispatch.server.domain.caller_scope import CallerScope
from hpcdispatch.server.domain.duration_predictor import Completion, JobFacts
from hpcdispatch.server.predictors.completion_store import CompletionRow
from hpcdispatch.server.predictors.knowledge_base import KnowledgeBase, KnowledgeBaseLimits
from hpcdispatch.server.predictors.last_two import LastTwoPredictor
from hpcdispatch.server.predictors.store_sqlite import SqliteStore
from tests.kb_old_schema import (
    EXPECTED_LAST_TWO,
    EXPECTED_SIM,
    GONE,
    REQUESTED,
    ROWS,
    SCHEMA_VERSION_ROW,
    SQLITE_INSERT,
    SQLITE_SCHEMA,
    predicted_from,
)

Stored = list[tuple[object, ...]]


def old_store(path: Path) -> Stored:
    """An SQLite file as release 60884a1 leaves it; its rows (rowid first), the gap included."""
    with sqlite3.connect(path) as db:
        for statement in SQLITE_SCHEMA:
            db.execute(statement)
        db.execute("INSERT INTO schema_version VALUES (?, ?, ?)", SCHEMA_VERSION_ROW)
        db.executemany(SQLITE_INSERT, ROWS)
        db.execute("DELETE FROM completions WHERE cluster = ? AND job_id = ?", GONE)
        rows = db.execute("SELECT rowid, * FROM completions ORDER BY rowid").fetchall()
    db.close()
    return rows


def upgraded(path: Path) -> Stored:
    """The rows as the upgraded file holds them, in the old rows' column order."""
    with sqlite3.connect(path) as db:
        rows = db.execute(
            'SELECT seq, identity, cluster, job_id, "user", name, name_prefix, shape, '
            "requested_time, start_time, end_time, run_time FROM completions ORDER BY seq"
        ).fetchall()
    db.close()
    return rows


def test_an_old_sqlite_store_is_upgraded_keeping_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "kb.sqlite"
    before = old_store(path)
    assert [row[0] for row in before] == [1, 2, 4, 5]  # the deleted row left a gap
    for _ in range(2):  # the second open finds the upgrade done and changes nothing
        store = SqliteStore(str(path))
        assert store.schema_versions() == [1, 2]
        assert store.scopes() == [CallerScope("", "west"), CallerScope("", "east")]
        store.close()
        assert upgraded(path) == [(row[0], "", *row[1:]) for row in before]
    kb = KnowledgeBase(str(path), limits=KnowledgeBaseLimits(max_clusters=8))
    try:
        assert predicted_from(kb) == (EXPECTED_LAST_TWO, EXPECTED_SIM)  # the identity ""
        nobody = ({key: REQUESTED for key in EXPECTED_LAST_TWO},
                  dict.fromkeys(EXPECTED_SIM, REQUESTED))
        assert predicted_from(kb, "CN=alice") == nobody  # another identity reads none of them
        # A report resent after the upgrade is still known; a new one comes after the rest.
        alice = JobFacts("alice", "app", "batch", 1, {"core": 4}, REQUESTED)
        assert kb.record("east", [Completion("2", alice, 0, 300)]) == 0
        assert kb.record("east", [Completion("4", alice, 400, 460)]) == 1
        newest = upgraded(path)[-1]
        assert newest[1:4] == ("", "east", "4") and newest[0] > before[-1][0]
        assert LastTwoPredictor(kb.history("east")).predict(alice) == (60 + 300) // 2
    finally:
        kb.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    db.close()


def test_a_deleted_last_row_never_gives_its_number_to_a_new_one(tmp_path: Path) -> None:
    """A completion reported late (older than what every key keeps) is forgotten at once;
    when it was the last row, SQLite's plain rowid gave its number again to the next row, which
    a refresh (rows above the last number read) then skipped."""
    kb = KnowledgeBase(str(tmp_path / "kb.sqlite"), refresh_seconds=0.0,
                       limits=KnowledgeBaseLimits(max_completions=2))
    job = JobFacts("u", "", "batch", 1, {"core": 1}, 10_000)
    try:
        kb.record("c", [Completion("x1", job, 900, 1_000), Completion("x2", job, 1_800, 2_000)])
        kb.record("c", [Completion("late", job, 450, 500)])
        assert kb.count("c") == 2
        kb.record("c", [Completion("z", job, 2_600, 3_000)])
        assert LastTwoPredictor(kb.history("c")).predict(job) == (400 + 200) // 2
    finally:
        kb.close()


def test_rows_are_read_back_per_scope_in_recording_order() -> None:
    store = SqliteStore()
    job = JobFacts("u", "", "batch", 1, {"core": 1}, 10_000)
    try:
        rows = [CompletionRow.of("c", Completion(str(i), job, 0, 10 + i), identity)
                for i, identity in enumerate(["A", "B", "A", ""])]
        assert store.record(rows) == 4
        assert store.record(rows[:2]) == 0  # a retried report: stored once
        assert [r.run_time for r in store.rows_since(CallerScope("A", "c"), 0)] == [10, 12]
        assert [r.run_time for r in store.rows_since(CallerScope("", "c"), 0)] == [13]
        assert store.scopes() == [CallerScope("B", "c"), CallerScope("A", "c"),
                                  CallerScope("", "c")]
        store.forget_scope(CallerScope("A", "c"))
        assert [store.count(CallerScope(i, "c")) for i in ("A", "B", "")] == [0, 1, 1]
    finally:
        store.close()
