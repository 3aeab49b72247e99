"""Duration predictors, their knowledge base and its SQLite store, on hand-made histories."""

from __future__ import annotations

import random
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from hpcdispatch.server.domain.caller_scope import CallerScope
from hpcdispatch.server.domain.duration_predictor import Completion, JobFacts
from hpcdispatch.server.predictors.completion_store import (
    CompletionRow,
    StoredCompletion,
    StoreUnavailable,
)
from hpcdispatch.server.predictors.data_driven import (
    DataDrivenPredictor,
    predict_from,
    resemblance_rules,
)
from hpcdispatch.server.predictors.history_index import HistoryFilter
from hpcdispatch.server.predictors.job_keys import name_prefix, request_shape
from hpcdispatch.server.predictors.knowledge_base import KnowledgeBase
from hpcdispatch.server.predictors.last_two import LastTwoPredictor
from hpcdispatch.server.predictors.migrations import MIGRATIONS, Migration, SchemaTooNew
from hpcdispatch.server.predictors.registry import PredictorRegistry
from hpcdispatch.server.predictors.store_sqlite import SqliteStore
from hpcdispatch.v1 import dispatcher_pb2 as pb

CLUSTER = "test"


def facts(
    user: str = "alice",
    name: str = "",
    requested_time: int = 10_000,
    units: int = 1,
    cores: int = 4,
    queue: str = "batch",
) -> JobFacts:
    return JobFacts(
        user=user, name=name, queue=queue, units=units, unit_request={"core": cores},
        requested_time=requested_time,
    )


def done(job_id: str, job: JobFacts, run_time: int, end_time: int) -> Completion:
    return Completion(job_id=job_id, facts=job, start_time=end_time - run_time, end_time=end_time)


@pytest.fixture
def kb() -> Iterator[KnowledgeBase]:
    store = KnowledgeBase()
    yield store
    store.close()


# -- Knowledge base -----------------------------------------------------------------------------


def test_each_completion_is_stored_once(kb: KnowledgeBase) -> None:
    first = done("1", facts(), 100, 1_000)
    assert kb.record(CLUSTER, [first, done("2", facts(), 50, 2_000)]) == 2
    assert kb.record(CLUSTER, [first]) == 0  # a retried report
    assert kb.count(CLUSTER) == 2


def test_clusters_keep_separate_histories(kb: KnowledgeBase) -> None:
    kb.record("a", [done("1", facts(), 100, 1_000)])
    kb.record("b", [done("1", facts(), 700, 1_000)])
    assert kb.history("a").last_run_times(HistoryFilter(user="alice"), 2) == [100]
    assert kb.history("b").last_run_times(HistoryFilter(user="alice"), 2) == [700]
    assert kb.count("c") == 0


def test_a_completion_ending_before_it_starts_stores_nothing(kb: KnowledgeBase) -> None:
    bad = Completion(job_id="bad", facts=facts(), start_time=500, end_time=400)
    with pytest.raises(ValueError, match="bad"):
        kb.record(CLUSTER, [done("good", facts(), 10, 100), bad])
    assert kb.count(CLUSTER) == 0


LATEST_FIRST = [
    done("late", facts(), 30, 3_000),
    done("early", facts(), 10, 1_000),
    done("tie-first", facts(), 21, 2_000),
    done("tie-second", facts(), 22, 2_000),
]


def test_latest_first_by_end_time_then_by_recording(kb: KnowledgeBase) -> None:
    kb.record(CLUSTER, LATEST_FIRST[1:])
    assert kb.last_run_times(CLUSTER, HistoryFilter(user="alice"), limit=2) == [22, 21]
    kb.record(CLUSTER, LATEST_FIRST[:1])
    assert kb.last_run_times(CLUSTER, HistoryFilter(user="alice"), limit=2) == [30, 22]


def test_the_direct_query_orders_as_the_index_does() -> None:
    store = SqliteStore()
    store.record([CompletionRow.of(CLUSTER, c) for c in LATEST_FIRST])
    assert store.last_run_times(CLUSTER, HistoryFilter(user="alice"), 10) == [30, 22, 21, 10]
    store.close()


def test_the_index_answers_only_the_filters_it_keeps(kb: KnowledgeBase) -> None:
    with pytest.raises(ValueError, match="no key"):
        kb.last_run_times(CLUSTER, HistoryFilter(name="n", shape="s"), 1)
    with pytest.raises(ValueError, match="latest 2"):
        kb.last_run_times(CLUSTER, HistoryFilter(user="u"), 3)


@pytest.mark.parametrize(
    "where",
    [
        HistoryFilter(user="u"),
        HistoryFilter(user="u", name="n", shape="s"),
        HistoryFilter(user="u", name="n"),
        HistoryFilter(name="n"),
        HistoryFilter(name_prefix="p"),
    ],
)
def test_every_direct_lookup_walks_an_index_in_order(where: HistoryFilter) -> None:
    store = SqliteStore()
    plan = " / ".join(store.query_plan(*store.query(CLUSTER, where, 2)))
    store.close()
    assert "USING INDEX" in plan, plan
    assert "TEMP B-TREE" not in plan, plan


def test_a_store_file_runs_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "kb.sqlite"
    KnowledgeBase(str(path)).close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_store_file_of_a_newer_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "kb.sqlite"
    SqliteStore(str(path)).close()
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO schema_version VALUES (99, 'from the future', 0)")
    with pytest.raises(SchemaTooNew, match="schema version 99"):
        KnowledgeBase(str(path))


def test_migrations_are_applied_once_and_in_order(tmp_path: Path) -> None:
    path = str(tmp_path / "kb.sqlite")
    store = SqliteStore(path)
    assert store.schema_versions() == [m.version for m in MIGRATIONS] == [1, 2]
    store.record([CompletionRow.of(CLUSTER, done("1", facts(), 5, 10))])
    store.close()
    added = Migration(3, "a test column", "ALTER TABLE completions ADD COLUMN note TEXT",
                      "ALTER TABLE completions ADD COLUMN note TEXT")
    for _ in range(2):  # the second open finds version 3 applied and changes nothing
        store = SqliteStore(path, migrations=[*MIGRATIONS, added])
        assert store.schema_versions() == [1, 2, 3]
        assert store.count(CallerScope("", CLUSTER)) == 1
        store.close()
    with sqlite3.connect(path) as db:
        assert "note" in [row[1] for row in db.execute("PRAGMA table_info(completions)")]


def test_a_file_from_before_numbered_migrations_is_adopted(tmp_path: Path) -> None:
    path = tmp_path / "kb.sqlite"
    with sqlite3.connect(path) as db:  # the previous release: the table and user_version 1
        for statement in MIGRATIONS[0].sqlite.split(";"):
            db.execute(statement)
        db.execute("INSERT INTO completions VALUES ('test', 'old', 'alice', 'app', 'app', "
                   "'batch|1|core=4', 100, 0, 70, 70)")
        db.execute("PRAGMA user_version=1")
    with PredictorRegistry(store_path=str(path)) as registry:
        assert registry.predictor(CLUSTER, pb.PREDICTOR_DATA_DRIVEN).predict(facts()) == 70


def test_a_store_that_cannot_be_opened_is_named(tmp_path: Path) -> None:
    path = tmp_path / "missing-dir" / "kb.sqlite"
    with pytest.raises(OSError, match="missing-dir"):
        KnowledgeBase(str(path))


@pytest.mark.parametrize(
    ("name", "prefix"),
    [
        ("namd", "namd"),
        ("Run_042.sh", "run"),
        ("/home/a/bin/run-7", "run"),
        ("lammps.2023.slurm", "lammps"),
        ("job12", "job"),
        ("1234", ""),
        ("", ""),
    ],
)
def test_name_prefix(name: str, prefix: str) -> None:
    assert name_prefix(name) == prefix


def test_request_shape_ignores_the_order_of_resource_kinds() -> None:
    one = JobFacts("u", "n", "q", 2, {"core": 4, "gpu": 1}, 100)
    other = JobFacts("u", "n", "q", 2, {"gpu": 1, "core": 4}, 100)
    assert request_shape(one) == request_shape(other)
    assert request_shape(one) != request_shape(facts(units=3))


# -- Last two -----------------------------------------------------------------------------------


def test_last_two_without_history_is_the_requested_time(kb: KnowledgeBase) -> None:
    kb.record(CLUSTER, [done("b1", facts(user="bob"), 60, 1_000)])
    assert LastTwoPredictor(kb.history(CLUSTER)).predict(facts(requested_time=3_600)) == 3_600


def test_last_two_with_one_job_is_its_run_time(kb: KnowledgeBase) -> None:
    kb.record(CLUSTER, [done("1", facts(), 420, 1_000)])
    assert LastTwoPredictor(kb.history(CLUSTER)).predict(facts()) == 420


def test_last_two_is_the_mean_of_the_two_latest_ends(kb: KnowledgeBase) -> None:
    # Recorded out of order: the two latest *ends* are 300 s (t=5000) and 100 s (t=4000).
    kb.record(CLUSTER, [
        done("1", facts(), 300, 5_000),
        done("2", facts(), 9_000, 2_000),
        done("3", facts(), 100, 4_000),
        done("4", facts(user="bob"), 7, 6_000),
    ])
    assert LastTwoPredictor(kb.history(CLUSTER)).predict(facts()) == 200


def test_last_two_is_capped_by_the_requested_time(kb: KnowledgeBase) -> None:
    kb.record(CLUSTER, [done("1", facts(), 5_000, 1_000), done("2", facts(), 3_000, 2_000)])
    assert LastTwoPredictor(kb.history(CLUSTER)).predict(facts(requested_time=1_800)) == 1_800


def test_last_two_is_at_least_one_second(kb: KnowledgeBase) -> None:
    kb.record(CLUSTER, [done("1", facts(), 0, 1_000), done("2", facts(), 0, 2_000)])
    assert LastTwoPredictor(kb.history(CLUSTER)).predict(facts()) == 1


def test_last_two_learns_actual_run_times_not_its_predictions(kb: KnowledgeBase) -> None:
    predictor = LastTwoPredictor(kb.history(CLUSTER))
    for i, run_time in enumerate([1_000, 40, 60]):
        predictor.predict(facts())
        predictor.learn(done(str(i), facts(), run_time, 1_000 * (i + 1)))
    # The predictions made along the way were 10000, 1000 and 520; the truth is 40 and 60.
    assert predictor.predict(facts()) == 50


# -- Data driven --------------------------------------------------------------------------------


def test_data_driven_rules_closest_first() -> None:
    job = facts(user="alice", name="sim_3.sh")
    assert resemblance_rules(job) == [
        HistoryFilter(user="alice", name="sim_3.sh", shape=request_shape(job)),
        HistoryFilter(user="alice", name="sim_3.sh"),
        HistoryFilter(name="sim_3.sh"),
        HistoryFilter(name_prefix="sim"),
        HistoryFilter(user="alice"),
    ]
    assert resemblance_rules(facts(user="alice", name="")) == [HistoryFilter(user="alice")]


def _history_for_fallbacks(kb: KnowledgeBase) -> DataDrivenPredictor:
    """Alice ran sim_1 on 4 cores (500 s) then on 8 (800 s); Bob ran sim_1 and sim_2; Carol x."""
    kb.record(CLUSTER, [
        done("a1", facts(user="alice", name="sim_1", cores=4), 500, 1_000),
        done("a2", facts(user="alice", name="sim_1", cores=8), 800, 2_000),
        done("b1", facts(user="bob", name="sim_1", cores=4), 1_500, 3_000),
        done("b2", facts(user="bob", name="sim_2", cores=4), 2_500, 4_000),
        done("c1", facts(user="carol", name="other"), 90, 5_000),
    ])
    return DataDrivenPredictor(kb.history(CLUSTER))


@pytest.mark.parametrize(
    ("job", "expected", "rule"),
    [
        (facts(user="alice", name="sim_1", cores=4), 500, "full profile, not the later 800 s"),
        (facts(user="alice", name="sim_1", cores=16), 800, "same user and name, latest"),
        (facts(user="dave", name="sim_1"), 1_500, "same name, latest of any user"),
        (facts(user="dave", name="sim_9"), 2_500, "same prefix 'sim', latest"),
        (facts(user="carol", name="fresh"), 90, "the user's last job"),
        (facts(user="carol", name=""), 90, "no name: the user's last job"),
        (facts(user="dave", name="fresh", requested_time=7_200), 7_200, "nothing: wall time"),
        (facts(user="bob", name="sim_2", requested_time=1_000), 1_000, "capped by wall time"),
    ],
)
def test_data_driven_fallbacks(kb: KnowledgeBase, job: JobFacts, expected: int, rule: str) -> None:
    assert _history_for_fallbacks(kb).predict(job) == expected, rule


def test_data_driven_follows_the_latest_completion(kb: KnowledgeBase) -> None:
    predictor = DataDrivenPredictor(kb.history(CLUSTER))
    job = facts(name="solver")
    predictor.learn(done("1", job, 300, 1_000))
    assert predictor.predict(job) == 300
    predictor.learn(done("0", job, 900, 500))  # reported late, but ended earlier
    assert predictor.predict(job) == 300
    predictor.learn(done("2", job, 600, 2_000))
    assert predictor.predict(job) == 600


# -- Registry -----------------------------------------------------------------------------------


def test_registry_offers_every_predictor() -> None:
    with PredictorRegistry() as registry:
        assert registry.kinds() == sorted([
            pb.PREDICTOR_WALLTIME, pb.PREDICTOR_LAST_TWO, pb.PREDICTOR_DATA_DRIVEN,
            pb.PREDICTOR_ORACLE,
        ])
        for kind in registry.kinds():
            assert registry.predictor(CLUSTER, kind) is registry.predictor(CLUSTER, kind)


def test_registry_stores_a_completion_once_for_all_predictors() -> None:
    with PredictorRegistry() as registry:
        completion = done("1", facts(name="app"), 250, 1_000)
        assert registry.learn(CLUSTER, [completion]) == 1
        assert registry.knowledge_base.count(CLUSTER) == 1
        job = facts(name="app", requested_time=1_000)
        assert registry.predictor(CLUSTER, pb.PREDICTOR_LAST_TWO).predict(job) == 250
        assert registry.predictor(CLUSTER, pb.PREDICTOR_DATA_DRIVEN).predict(job) == 250
        assert registry.predictor(CLUSTER, pb.PREDICTOR_WALLTIME).predict(job) == 1_000
        assert registry.predictor("elsewhere", pb.PREDICTOR_LAST_TWO).predict(job) == 1_000


def test_history_survives_reopening_the_store(tmp_path: Path) -> None:
    path = str(tmp_path / "kb.sqlite")
    with PredictorRegistry(store_path=path) as registry:
        registry.learn(CLUSTER, [
            done("1", facts(name="app"), 100, 1_000),
            done("2", facts(name="app"), 300, 2_000),
        ])
    with PredictorRegistry(store_path=path) as reopened:
        assert reopened.predictor(CLUSTER, pb.PREDICTOR_LAST_TWO).predict(facts()) == 200
        assert reopened.predictor(CLUSTER, pb.PREDICTOR_DATA_DRIVEN).predict(facts()) == 300
        reopened.learn(CLUSTER, [done("3", facts(), 500, 3_000), done("2", facts(), 300, 2_000)])
        assert reopened.knowledge_base.count(CLUSTER) == 3
        assert reopened.predictor(CLUSTER, pb.PREDICTOR_LAST_TWO).predict(facts()) == 400


@pytest.mark.parametrize("in_file", [False, True])
def test_threads_learning_while_others_predict(tmp_path: Path, in_file: bool) -> None:
    path = str(tmp_path / "kb.sqlite") if in_file else None
    users, per_user = 4, 50
    errors: list[BaseException] = []
    with PredictorRegistry(store_path=path) as registry:

        def learner(user: str) -> None:
            try:
                for i in range(per_user):  # run time i+1, ending at (i+1)*100
                    job = facts(user=user, name=f"app{i}")
                    registry.learn(CLUSTER, [done(f"{user}-{i}", job, i + 1, (i + 1) * 100)])
            except BaseException as exc:
                errors.append(exc)

        def predictor_loop(kind: int) -> None:
            try:
                for i in range(per_user):
                    job = facts(user=f"u{i % users}", requested_time=per_user)
                    d = registry.predictor(CLUSTER, kind).predict(job)
                    assert 1 <= d <= per_user
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=learner, args=(f"u{u}",)) for u in range(users)]
        threads += [
            threading.Thread(target=predictor_loop, args=(kind,))
            for kind in (pb.PREDICTOR_LAST_TWO, pb.PREDICTOR_DATA_DRIVEN) * 2
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not errors, errors
        assert registry.knowledge_base.count(CLUSTER) == users * per_user
        last_two = registry.predictor(CLUSTER, pb.PREDICTOR_LAST_TWO)
        for u in range(users):  # the last two run times are per_user and per_user - 1
            expected = round((per_user + per_user - 1) / 2)
            assert last_two.predict(facts(user=f"u{u}")) == expected


# -- Batches, refreshes, the store unavailable ---------------------------------------------------


class CountingStore:
    """An SQLite store that counts reads and can be switched off (as if the server went away)."""

    def __init__(self, path: str | None = None) -> None:
        self.inner = SqliteStore(path)
        self.location = self.inner.location
        self.reads = 0
        self.down = False

    def record(self, rows: Sequence[CompletionRow]) -> int:
        if self.down:
            raise StoreUnavailable("switched off")
        return self.inner.record(rows)

    def rows_since(self, scope: CallerScope, after_seq: int) -> list[StoredCompletion]:
        self.reads += 1
        if self.down:
            raise StoreUnavailable("switched off")
        return self.inner.rows_since(scope, after_seq)

    def count(self, scope: CallerScope) -> int:
        return self.inner.count(scope)

    def forget(self, scope: CallerScope, seqs: Sequence[int]) -> None:
        if self.down:
            raise StoreUnavailable("switched off")
        self.inner.forget(scope, seqs)

    def scopes(self) -> list[CallerScope]:
        return self.inner.scopes()

    def forget_scope(self, scope: CallerScope) -> None:
        if self.down:
            raise StoreUnavailable("switched off")
        self.inner.forget_scope(scope)

    def close(self) -> None:
        self.inner.close()


def test_a_batch_reads_the_store_at_most_once() -> None:
    store = CountingStore()
    kb = KnowledgeBase(store=store, refresh_seconds=3_600)
    jobs = [facts(user=f"u{i % 7}", name=f"app{i % 5}") for i in range(1_000)]
    kb.record(CLUSTER, [done(str(i), job, 10 + i, 100 + i) for i, job in enumerate(jobs)])
    for predictor in (DataDrivenPredictor(kb.history(CLUSTER)),
                      LastTwoPredictor(kb.history(CLUSTER))):
        before = store.reads
        assert len(predictor.predict_many(jobs)) == len(jobs)
        assert len(predictor.predict_many(jobs)) == len(jobs)
        assert store.reads - before <= 1
    assert store.reads == 1  # the record invalidated the index once; the interval holds since
    kb.close()


def test_another_writer_is_seen_after_the_refresh_interval(tmp_path: Path) -> None:
    path = str(tmp_path / "kb.sqlite")
    writer, reader = KnowledgeBase(path), KnowledgeBase(path, refresh_seconds=0.0)
    cached = KnowledgeBase(path, refresh_seconds=3_600)
    predictors = [DataDrivenPredictor(kb.history(CLUSTER)) for kb in (reader, cached)]
    job = facts(name="shared", requested_time=5_000)
    assert [p.predict(job) for p in predictors] == [5_000, 5_000]
    writer.record(CLUSTER, [done("1", job, 123, 1_000)])
    assert [p.predict(job) for p in predictors] == [123, 5_000]  # within the interval: cached
    for kb in (writer, reader, cached):
        kb.close()


def test_predictions_go_on_when_the_store_is_unavailable() -> None:
    fallbacks: list[str] = []
    store = CountingStore()
    kb = KnowledgeBase(store=store, refresh_seconds=0.0, retry_seconds=3_600,
                       on_fallback=fallbacks.append)
    known, unknown = facts(name="known"), facts(user="zed", name="new", requested_time=4_000)
    kb.record(CLUSTER, [done("1", known, 300, 1_000)])
    predictor = DataDrivenPredictor(kb.history(CLUSTER))
    assert predictor.predict_many([known, unknown]) == [300, 4_000]
    store.down = True
    # From what was read before; the requested time for what was never seen. Counted per batch.
    assert predictor.predict_many([known, unknown]) == [300, 4_000]
    assert fallbacks == [CLUSTER]
    reads = store.reads
    assert predictor.predict_many([known]) == [300]  # within retry_seconds: not tried again
    assert store.reads == reads and fallbacks == [CLUSTER, CLUSTER]
    other = DataDrivenPredictor(kb.history("never-read"))
    assert other.predict_many([known]) == [known.requested_time]
    with pytest.raises(StoreUnavailable):  # a completion that was not stored is not accepted
        kb.record(CLUSTER, [done("2", known, 10, 2_000)])
    kb.close()


def test_the_store_is_tried_again_after_the_retry_interval() -> None:
    fallbacks: list[str] = []
    store = CountingStore()
    kb = KnowledgeBase(store=store, refresh_seconds=0.0, retry_seconds=0.0,
                       on_fallback=fallbacks.append)
    predictor = LastTwoPredictor(kb.history(CLUSTER))
    store.down = True
    assert predictor.predict(facts(requested_time=900)) == 900
    store.down = False
    kb.store.record([CompletionRow.of(CLUSTER, done("1", facts(), 60, 100))])
    assert predictor.predict(facts(requested_time=900)) == 60
    assert fallbacks == [CLUSTER]
    kb.close()


def _brute_force_data_driven(rows: list[Completion], job: JobFacts) -> int:
    """Rules 1-5 walked over the whole history, the latest (end time, then order) first."""
    ordered = sorted(enumerate(rows), key=lambda r: (r[1].end_time, r[0]), reverse=True)
    for rule in resemblance_rules(job):
        for _, row in ordered:
            f = row.facts
            if all(wanted is None or wanted == have for wanted, have in zip(
                    rule.key, (f.user, f.name, name_prefix(f.name), request_shape(f)),
                    strict=True)):
                return max(1, min(job.requested_time, row.run_time))
    return job.requested_time


def test_the_index_predicts_what_walking_the_whole_history_does() -> None:
    rng = random.Random(7)

    def random_job() -> JobFacts:
        return facts(user=rng.choice(["a", "b", "c"]),
                     name=rng.choice(["", "sim_1", "sim_2", "Sim-3.sh", "x", "42"]),
                     cores=rng.choice([1, 4]), requested_time=rng.choice([50, 500, 5_000]))

    rows = [done(str(i), random_job(), rng.randrange(0, 800), rng.randrange(1_000, 1_100))
            for i in range(300)]
    kb = KnowledgeBase()
    kb.record(CLUSTER, rows)
    jobs = [random_job() for _ in range(300)] + [facts(user="new", name="unseen")]
    with kb.history(CLUSTER).reading() as index:
        for job in jobs:
            assert predict_from(index, job) == _brute_force_data_driven(rows, job), job
    kb.close()
