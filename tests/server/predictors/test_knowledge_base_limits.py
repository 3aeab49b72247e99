"""Issue #33, item 4: what the predictors' knowledge base keeps of what callers send is bounded —
completions and bytes per scope (here every caller is the identity "", so a scope is a
cluster), and clusters — and within the limits predictions are those of the whole history.
The bounds per identity: test_scoped_history.py.

Checked by counts and predictions, never by memory or time: the store's rows after reports
beyond the limits, which completions went (the ones no prediction reads, then the oldest), the
predictions of a bounded knowledge base against the same questions asked of every completion
ever reported (`SqliteStore.last_run_times`, one query over all rows), before and after a
restart, and the same through a real gRPC server configured with the `knowledge_base_*` keys.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpcdispatch.client import DispatcherClient
from hpcdispatch.server.config import load_config
from hpcdispatch.server.domain.duration_predictor import Completion, JobFacts
from hpcdispatch.server.predictors.completion_store import completion_rows
from hpcdispatch.server.predictors.data_driven import DataDrivenPredictor
from hpcdispatch.server.predictors.history_index import row_keys, text_bytes, texts_of
from hpcdispatch.server.predictors.job_keys import KEPT_CHARS, kept, name_prefix
from hpcdispatch.server.predictors.knowledge_base import (
    KnowledgeBase,
    KnowledgeBaseLimits,
    scope_of,
)
from hpcdispatch.server.predictors.last_two import LastTwoPredictor
from hpcdispatch.server.predictors.store_sqlite import SqliteStore
from hpcdispatch.server.rpc.app import RunningServer, start_server
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.kb_workload import REQUESTED, history, predictions, probes, whole_history

CLUSTER = "limits"


def facts(user: str = "alice", name: str = "") -> JobFacts:
    return JobFacts(user=user, name=name, queue="batch", units=1, unit_request={"core": 1},
                    requested_time=REQUESTED)


def done(job_id: str, job: JobFacts, run_time: int, end_time: int) -> Completion:
    return Completion(job_id, job, end_time - run_time, end_time)


def most_read(jobs: list[JobFacts]) -> int:
    """At most this many completions of these jobs' kinds can be read by some key: DEPTH (2)
    per key."""
    keys = {key for job in jobs
            for key in row_keys(texts_of(completion_rows(CLUSTER, [done("x", job, 1, 1)])[0]))}
    return 2 * len(keys)


# -- within the limits: the predictions of the whole history -------------------------------------


def test_within_the_limits_predictions_are_those_of_the_whole_history(tmp_path: Path) -> None:
    reported = history(seed=7, completions=3_000)
    limit = most_read([c.facts for c in reported])
    path = str(tmp_path / "kb.sqlite")
    kb = KnowledgeBase(path, limits=KnowledgeBaseLimits(max_completions=limit))
    whole = SqliteStore()  # every completion, never forgotten: the reference
    asked = probes(seed=7)
    try:
        for start in range(0, len(reported), 250):
            batch = reported[start:start + 250]
            kb.record(CLUSTER, batch)
            whole.record(completion_rows(CLUSTER, batch))
            assert predictions(kb, CLUSTER, asked) == whole_history(whole, CLUSTER, asked)
        assert kb.count(CLUSTER) <= limit < len(reported)  # the store forgot the rest
        before = predictions(kb, CLUSTER, asked)
    finally:
        kb.close()
    restarted = KnowledgeBase(path, limits=KnowledgeBaseLimits(max_completions=limit))
    try:
        assert predictions(restarted, CLUSTER, asked) == before
    finally:
        restarted.close()
        whole.close()


# -- beyond them: what no prediction reads, then the oldest ---------------------------------------


def test_beyond_the_limit_the_oldest_history_goes_first(tmp_path: Path) -> None:
    path = str(tmp_path / "kb.sqlite")
    kb = KnowledgeBase(path, limits=KnowledgeBaseLimits(max_completions=4))
    try:
        for i in range(6):  # one job per user, u0's ending first
            kb.record(CLUSTER, [done(f"j{i}", facts(user=f"u{i}"), 100 + i, 1_000 * (i + 1))])
        last_two = LastTwoPredictor(kb.history(CLUSTER))
        assert [last_two.predict(facts(user=f"u{i}")) for i in range(6)] == [
            REQUESTED, REQUESTED, 102, 103, 104, 105]
        assert kb.count(CLUSTER) == 4
    finally:
        kb.close()


def test_completions_no_prediction_reads_go_before_older_ones_that_one_does() -> None:
    kb = KnowledgeBase(limits=KnowledgeBaseLimits(max_completions=3))
    try:
        kb.record(CLUSTER, [done("b-1", facts(user="bob"), 50, 100)])  # the oldest of all
        kb.record(CLUSTER, [done(f"a-{i}", facts(user="alice"), 10 * i, 200 + 100 * i)
                            for i in range(1, 11)])
        last_two = LastTwoPredictor(kb.history(CLUSTER))
        # Alice's eight earlier runs went (last_two reads her last two only); Bob's stays.
        assert last_two.predict(facts(user="bob")) == 50
        assert last_two.predict(facts(user="alice")) == 95
        assert kb.count(CLUSTER) == 3
    finally:
        kb.close()


def test_long_names_are_kept_short_and_apart_and_the_bytes_are_bounded() -> None:
    # 1,000 characters each, differing from the first character on (each its own prefix too).
    long_names = [f"{chr(ord('a') + i)}{'x' * 989}-{i:04d}.sh" for i in range(5)]
    jobs = [facts(user="carol", name=name) for name in long_names]
    row = completion_rows(CLUSTER, [done("x", jobs[0], 1, 1)])[0]
    assert max(len(text) for text in (row.job_id, row.user, row.name, row.name_prefix,
                                      row.shape)) <= KEPT_CHARS
    assert row.name_prefix == kept(name_prefix(long_names[0])) != row.name
    size = text_bytes(texts_of(row))
    kb = KnowledgeBase(limits=KnowledgeBaseLimits(max_bytes=3 * size))
    try:
        kb.record(CLUSTER, [done(f"c-{i}", job, 100 + i, 1_000 * (i + 1))
                            for i, job in enumerate(jobs)])
        names_only = [dataclasses.replace(job, user="dave") for job in jobs]  # rule 3: the name
        assert DataDrivenPredictor(kb.history(CLUSTER)).predict_many(names_only) == [
            REQUESTED, REQUESTED, 102, 103, 104]
        assert kb.count(CLUSTER) == 3
        assert max(len(r.name) for r in kb.store.rows_since(scope_of(CLUSTER), 0)) == KEPT_CHARS
    finally:
        kb.close()
    twins = [facts(user="erin", name="y" * 999 + last) for last in "12"]  # differ at the end
    kb = KnowledgeBase()
    try:
        kb.record(CLUSTER, [done(f"t-{i}", job, 7 + 2 * i, 1_000) for i, job in enumerate(twins)])
        asked = [dataclasses.replace(job, user="frank") for job in twins]
        assert DataDrivenPredictor(kb.history(CLUSTER)).predict_many(asked) == [7, 9]
    finally:
        kb.close()


# -- clusters -------------------------------------------------------------------------------------


def test_clusters_beyond_the_limit_forget_the_one_reported_least_recently(tmp_path: Path) -> None:
    path = str(tmp_path / "kb.sqlite")
    kb = KnowledgeBase(path, limits=KnowledgeBaseLimits(max_clusters=3))
    try:
        for c in range(5):
            kb.record(f"c{c}", [done("1", facts(), 100 + c, 1_000)])
        assert [kb.count(f"c{c}") for c in range(5)] == [0, 0, 1, 1, 1]
        for c in range(100):  # only asked: no history, none deleted, a bounded few in memory
            assert LastTwoPredictor(kb.history(f"asked-{c}")).predict(facts()) == REQUESTED
        assert kb.scopes_in_memory() == 3
        assert [kb.count(f"c{c}") for c in range(2, 5)] == [1, 1, 1]
        assert LastTwoPredictor(kb.history("c2")).predict(facts()) == 102  # read back
    finally:
        kb.close()
    smaller = KnowledgeBase(path, limits=KnowledgeBaseLimits(max_clusters=2))
    try:  # a lower limit at start: the cluster reported least recently goes at once
        assert [smaller.count(f"c{c}") for c in range(2, 5)] == [0, 1, 1]
    finally:
        smaller.close()


# -- through the service -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    config = dataclasses.replace(
        load_config(env={}), listen="127.0.0.1:0", workers=2,
        knowledge_base_max_completions=5, knowledge_base_max_clusters=2)
    running = start_server(config)
    yield running
    running.stop(grace=1.0)


def report(i: int, name: str = "app") -> pb.JobCompletion:
    return pb.JobCompletion(job_id=f"j{i}", user=f"u{i}", name=name, queue="batch", units=1,
                            unit_request={"core": 1}, requested_time=REQUESTED,
                            start_time=1_000 * i, end_time=1_000 * i + 60 + i)


def test_the_configured_limits_bound_what_the_service_keeps(server: RunningServer) -> None:
    knowledge_base = server.predictors.knowledge_base
    with DispatcherClient(server.target, timeout=30) as client:
        for i in range(20):  # every user's only run: each read by its user's key
            assert client.report_completions([report(i, name="n" * 1_024)], cluster="svc") == 1
        assert knowledge_base.count("svc") == 5
        stored = knowledge_base.store.rows_since(scope_of("svc"), 0)
        assert {len(r.name) for r in stored} == {KEPT_CHARS}
        for cluster in ("other-1", "other-2"):
            client.report_completions([report(0)], cluster=cluster)
    assert [knowledge_base.count(c) for c in ("svc", "other-1", "other-2")] == [0, 1, 1]


@pytest.mark.parametrize("key", ["knowledge_base_max_completions", "knowledge_base_max_bytes",
                                 "knowledge_base_max_clusters", "knowledge_base_max_identities"])
def test_a_limit_below_one_is_refused_naming_the_key(key: str) -> None:
    with pytest.raises(ValueError, match=f"HPCDISPATCH_{key.upper()}.*{key}.*must be >= 1"):
        load_config(env={f"HPCDISPATCH_{key.upper()}": "0"})
