"""Issue #43 item 2: the predictors' history is kept per client identity and cluster.

Over real gRPC with mutual TLS and two client identities (alice and bob, tests/certificates.py)
on an SQLite store: what bob reports — into alice's cluster name and to more new cluster names
than an identity keeps — leaves alice's predictions (asked by Dispatch, by a session of unary
calls and by a session stream) and alice's rows in the store as they were, while bob's own
predictions follow his reports. Then the knowledge base alone: the bounds per identity and on
identities, in the store and in memory.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpcdispatch.client import DispatcherClient, channel_credentials
from hpcdispatch.server.config import load_config
from hpcdispatch.server.domain.caller_scope import CallerScope
from hpcdispatch.server.domain.duration_predictor import Completion, JobFacts
from hpcdispatch.server.predictors.completion_store import StoreUnavailable
from hpcdispatch.server.predictors.knowledge_base import KnowledgeBase, KnowledgeBaseLimits
from hpcdispatch.server.predictors.last_two import LastTwoPredictor
from hpcdispatch.server.predictors.store_sqlite import SqliteStore
from hpcdispatch.server.rpc.app import RunningServer, start_server
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.certificates import two_client_pki

REQUESTED = 3_600
ALICES = "alice-site"
USERS = ("u0", "u1", "u2", "u3")
PREDICTORS = (pb.PREDICTOR_DATA_DRIVEN, pb.PREDICTOR_LAST_TWO)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return two_client_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("kb") / "predictors.sqlite"


@pytest.fixture(scope="module")
def server(pki: dict[str, Path], store: Path) -> Iterator[RunningServer]:
    config = dataclasses.replace(
        load_config(env={}), listen="127.0.0.1:0", workers=4, predictor_store=str(store),
        tls_cert=str(pki["server_cert"]), tls_key=str(pki["server_key"]),
        tls_client_ca=str(pki["ca"]), tls_client_identities=("alice", "bob"))
    running = start_server(config)
    yield running
    running.stop(grace=1.0)


def client_of(server: RunningServer, pki: dict[str, Path], who: str) -> DispatcherClient:
    credentials = channel_credentials(pki["ca"], pki[f"{who}_cert"], pki[f"{who}_key"])
    return DispatcherClient(server.target, timeout=120, credentials=credentials)


def completion(job_id: str, user: str, run_time: int, end_time: int) -> pb.JobCompletion:
    return pb.JobCompletion(job_id=job_id, user=user, name="app", queue="batch", units=1,
                            unit_request={"core": 1}, requested_time=REQUESTED,
                            start_time=end_time - run_time, end_time=end_time)


def request(cluster: str, predictor: int) -> pb.DispatchRequest:
    """One queued job of each user, named as the reported ones; every one fits at once."""
    return pb.DispatchRequest(
        time=100_000, cluster=cluster, dispatcher=pb.DISPATCHER_FCFS,
        predictor=pb.Predictor.ValueType(predictor),
        nodes=[pb.Node(id="n0", state=pb.NODE_STATE_UP, capacity={"core": 64})],
        queued_jobs=[pb.QueuedJob(id=f"q-{user}", user=user, name="app", queue="batch",
                                  submit_time=99_000, units=1, unit_request={"core": 1},
                                  requested_time=REQUESTED) for user in USERS])


Predicted = dict[tuple[int, str], int]  # (predictor, job id) -> expected duration


def predicted(decide: object, cluster: str) -> Predicted:
    """The durations each predictor gives the queued jobs, as `decide(request)` answers."""
    out: Predicted = {}
    for predictor in PREDICTORS:
        response = decide(request(cluster, predictor))  # type: ignore[operator]
        assert len(response.starts) == len(USERS)
        out.update({(predictor, s.job_id): s.expected_duration for s in response.starts})
    return out


def asked_every_way(client: DispatcherClient, cluster: str) -> list[Predicted]:
    """The predictions by Dispatch, by a session of unary calls, by a session stream."""
    answers = [predicted(client.dispatch, cluster)]
    for stream in (False, True):
        session = client.session(stream=stream)
        try:
            answers.append(predicted(session.decide, cluster))
        finally:
            session.close()
    return answers


def rows_of(store: Path, cluster: str, prefix: str) -> list[tuple[str, str, int, int]]:
    """(job id, user, run time, end time) of the stored rows of `cluster` whose job id starts
    with `prefix`, read from the file (any schema version: no identity column named)."""
    with sqlite3.connect(store) as db:
        return db.execute(
            'SELECT job_id, "user", run_time, end_time FROM completions '
            "WHERE cluster = ? AND job_id LIKE ? ORDER BY job_id", (cluster, f"{prefix}%"),
        ).fetchall()


def alice_reports(
    alice: DispatcherClient, store: Path, cluster: str,
) -> tuple[list[Predicted], list[tuple[str, str, int, int]]]:
    """Alice reports 200 completions for `cluster`; her predictions every way, and her rows."""
    reports = [completion(f"a-{i:03d}", USERS[i % 4], 600 + 10 * i, 10_000 + 100 * i)
               for i in range(200)]
    assert alice.report_completions(reports, cluster=cluster) == 200
    before = asked_every_way(alice, cluster)
    assert before[0][(pb.PREDICTOR_LAST_TWO, "q-u3")] == (600 + 1_990 + 600 + 1_950) // 2
    assert before == [before[0]] * 3
    rows = rows_of(store, cluster, "a-")
    assert len(rows) == 200
    return before, rows


def test_anothers_completions_for_the_same_cluster_name_leave_predictions_and_rows(
    server: RunningServer, pki: dict[str, Path], store: Path,
) -> None:
    with client_of(server, pki, "alice") as alice, client_of(server, pki, "bob") as bob:
        before, alices_rows = alice_reports(alice, store, ALICES)
        # Bob: one-second runs of the same users and application, the latest of all, into
        # alice's cluster name (unary, and on his session stream).
        late = [completion(f"b-{user}", user, 1, 90_000) for user in USERS]
        assert bob.report_completions(late[:2], cluster=ALICES) == 2
        session = bob.session(stream=True)
        try:
            assert session.report_completions(
                pb.ReportCompletionsRequest(completions=late[2:], cluster=ALICES)) == 2
            assert asked_every_way(alice, ALICES) == before
            assert rows_of(store, ALICES, "a-") == alices_rows
            # Bob's own predictions follow his reports: a one-second run is all he reported.
            ones = {(predictor, f"q-{user}"): 1 for predictor in PREDICTORS for user in USERS}
            assert predicted(session.decide, ALICES) == ones
            assert predicted(bob.dispatch, ALICES) == ones
        finally:
            session.close()


def test_anothers_completions_for_many_new_cluster_names_leave_predictions_and_rows(
    server: RunningServer, pki: dict[str, Path], store: Path,
) -> None:
    cluster = "alice-home"
    with client_of(server, pki, "alice") as alice, client_of(server, pki, "bob") as bob:
        before, alices_rows = alice_reports(alice, store, cluster)
        # Bob: one completion to each of twelve new cluster names (an identity keeps a
        # history for eight clusters, knowledge_base_max_clusters).
        for n in range(12):
            assert bob.report_completions([completion("b-1", "u0", 5, 80_000)],
                                          cluster=f"bob-{n}") == 1
        assert asked_every_way(alice, cluster) == before
        assert rows_of(store, cluster, "a-") == alices_rows
        # Bob's eight latest clusters are kept, his earlier ones forgotten.
        assert [len(rows_of(store, f"bob-{n}", "b-")) for n in range(12)] == [0] * 4 + [1] * 8
        assert predicted(bob.dispatch, "bob-11")[(pb.PREDICTOR_LAST_TWO, "q-u0")] == 5


# -- the knowledge base's bounds per identity ---------------------------------------------------


def facts(user: str = "alice") -> JobFacts:
    return JobFacts(user=user, name="", queue="batch", units=1, unit_request={"core": 1},
                    requested_time=REQUESTED)


def done(job_id: str, run_time: int, end_time: int, user: str = "alice") -> Completion:
    return Completion(job_id, facts(user), end_time - run_time, end_time)


def predict(kb: KnowledgeBase, cluster: str, identity: str) -> int:
    return LastTwoPredictor(kb.history(cluster, identity)).predict(facts())


def test_each_identity_keeps_its_own_clusters_within_its_bound(tmp_path: Path) -> None:
    path = str(tmp_path / "kb.sqlite")
    limits = KnowledgeBaseLimits(max_clusters=2, max_identities=2)
    kb = KnowledgeBase(path, limits=limits)
    try:
        kb.record("c", [done("1", 100, 1_000)], identity="A")
        kb.record("c", [done("1", 7, 2_000)], identity="B")  # same job id, another identity
        assert (predict(kb, "c", "A"), predict(kb, "c", "B"), predict(kb, "c", "")) == (
            100, 7, REQUESTED)
        for n in range(5):  # B's new clusters push out B's own, never A's
            kb.record(f"b{n}", [done("1", 9, 3_000 + n)], identity="B")
        assert [kb.count("c", "A"), kb.count("c", "B")] == [1, 0]
        assert [kb.count(f"b{n}", "B") for n in range(5)] == [0, 0, 0, 1, 1]
        kb.record("c", [done("2", 50, 4_000)], identity="A")  # A reports last
        kb.record("x", [done("1", 3, 5_000)], identity="C")  # a third identity: B goes
        assert [kb.count("c", "A"), kb.count("x", "C")] == [2, 1]
        assert [kb.count(f"b{n}", "B") for n in range(5)] == [0] * 5
    finally:
        kb.close()
    # The same bounds at start on the rows left: nothing more goes; a lower one applies.
    reopened = KnowledgeBase(path, limits=limits)
    try:
        assert [reopened.count("c", "A"), reopened.count("x", "C")] == [2, 1]
        assert predict(reopened, "c", "A") == 75
    finally:
        reopened.close()
    one = KnowledgeBase(path, limits=dataclasses.replace(limits, max_identities=1))
    try:
        assert [one.count("c", "A"), one.count("x", "C")] == [0, 1]
    finally:
        one.close()


def test_one_identitys_decisions_never_drop_anothers_history_from_memory() -> None:
    kb = KnowledgeBase(limits=KnowledgeBaseLimits(max_clusters=3, max_identities=4))
    try:
        kb.record("c", [done("1", 100, 1_000)], identity="A")
        alices = kb.history("c", "A")
        for n in range(50):  # asked only: B's histories in memory are B's three latest
            assert predict(kb, f"asked-{n}", "B") == REQUESTED
        assert kb.scopes_in_memory() == 4
        assert kb.history("c", "A") is alices  # still held, never read back
        for identity in ("C", "D", "E", "F"):  # beyond the bound: B, then A dropped
            kb.history("c", identity)
        assert kb.history("c", "A") is not alices
        assert predict(kb, "c", "A") == 100  # read back from the store
    finally:
        kb.close()


class ForgetFails(SqliteStore):
    """An in-memory store whose deleting of a whole scope can be switched off."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    def forget_scope(self, scope: CallerScope) -> None:
        if self.down:
            raise StoreUnavailable("switched off")
        super().forget_scope(scope)


def test_a_scope_the_store_could_not_delete_goes_at_its_identitys_next_report() -> None:
    store = ForgetFails()
    kb = KnowledgeBase(store=store, limits=KnowledgeBaseLimits(max_clusters=1))
    try:
        kb.record("a", [done("1", 10, 1_000)], identity="B")
        store.down = True
        kb.record("b", [done("1", 20, 2_000)], identity="B")  # "a" should go, and cannot
        assert [kb.count(c, "B") for c in "ab"] == [1, 1]
        store.down = False
        kb.record("x", [done("1", 30, 3_000)], identity="A")  # another identity's: no matter
        assert [kb.count(c, "B") for c in "ab"] == [1, 1]
        kb.record("c", [done("1", 40, 4_000)], identity="B")
        assert [kb.count(c, "B") for c in "abc"] == [0, 0, 1]
        assert kb.count("x", "A") == 1
    finally:
        kb.close()
