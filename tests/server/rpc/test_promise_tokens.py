"""Promises nobody can forge (issue #42, item 5), over real gRPC: a promised start sent back is
believed only with the token this server, or a replica with the same key, issued for that job,
cluster, caller and start, before its expiry; every other one is ignored (the job holds no
promise from the caller: the decision is the one without it) and counted by reason.

The cases are those of tests/promise_cases.py; each forged promise is sent on a cluster the
server holds no book for, as to a replica, where believing it would change the decision.
Replicas, each a process of its own: tests/server/rpc/test_promise_replicas.py."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from hpcdispatch.client import DispatcherClient
from hpcdispatch.server.rpc.app import RunningServer
from tests.observability import value
from tests.promise_cases import Promises, T, plan, promises, request

_clusters = itertools.count()


def fresh_cluster() -> str:
    """A cluster name no book of the server has seen: a replica that never made a promise."""
    return f"promise-tokens-{next(_clusters)}"


def refused(server: RunningServer, reason: str) -> float:
    return value(server.metrics.exposition().decode(), "hpcdispatch_promises_refused_total",
                 reason=reason)


@pytest.fixture(scope="module")
def real(server: RunningServer) -> dict[str, tuple[int, str]]:
    """The promises the server gives A and B at T (cluster "issued"), with their tokens."""
    with DispatcherClient(server.target, timeout=60) as client:
        answer = client.dispatch(request(T, "issued"))
    assert plan(answer) == ([], [("A", T + 1000, True, 0), ("B", T + 2000, True, 0)])
    return promises(answer)


def test_a_forged_promise_now_neither_starts_a_newer_job_nor_moves_an_older_ones(
    server: RunningServer, client: DispatcherClient,
) -> None:
    """The issue's case: B, the newer job, sent back with promised_start = now and no token.
    Believed (main before this change), B started at once and A's promise moved from T + 1,000
    to T + 2,002 while the report said moved 0; now B is treated as holding no promise."""
    before = refused(server, "missing")
    forged = client.dispatch(request(T + 2, fresh_cluster(), {"B": (T + 2, "")}))
    assert plan(forged) == ([], [("A", T + 1000, True, 0), ("B", T + 2000, True, 0)])
    assert refused(server, "missing") == before + 1


def _altered(token: str, part: int, text: str) -> str:
    parts = token.split(".")
    parts[part] = text
    return ".".join(parts)


# Each forgery of B's promise, made from the real promises (job id -> (start, token)), and the
# reason it is refused for.
FORGERIES: dict[str, tuple[Callable[[dict[str, tuple[int, str]]], Promises], str]] = {
    "no token": (lambda real: {"B": (T + 1, "")}, "missing"),
    "a made-up token": (lambda real: {"B": (T + 1, "2.99999." + "A" * 44)},
                        "invalid"),
    "another job's token": (lambda real: {"B": real["A"]}, "invalid"),
    "another cluster's token": (lambda real: {"B": real["B"]}, "invalid"),
    "an altered start": (lambda real: {"B": (T + 1, real["B"][1])}, "invalid"),
    "an altered expiry": (
        lambda real: {"B": (real["B"][0], _altered(real["B"][1], 1, str(10**9)))}, "invalid"),
    "not a token": (lambda real: {"B": (real["B"][0], "please start me")}, "malformed"),
    "a token too long": (lambda real: {"B": (real["B"][0], real["B"][1] + "=" * 64)},
                         "malformed"),
}


@pytest.mark.parametrize("case", sorted(FORGERIES))
def test_a_promise_not_issued_for_this_job_cluster_and_start_is_ignored_and_counted(
    case: str, server: RunningServer, client: DispatcherClient,
    real: dict[str, tuple[int, str]],
) -> None:
    """Sent to a cluster without a book, with E seen late: the decision is the one without
    the promise (believed, B would start now, or keep T + 2,000 ahead of E)."""
    forge, reason = FORGERIES[case]
    honest = plan(client.dispatch(request(T + 1, fresh_cluster(), late_e=True)))
    assert honest == ([], [("A", T + 1000, True, 0), ("B", T + 3000, True, 0),
                           ("E", T + 2000, True, 0)])
    before = refused(server, reason)
    forged = client.dispatch(request(T + 1, fresh_cluster(), forge(real), late_e=True))
    assert plan(forged) == honest
    assert refused(server, reason) == before + 1


def test_a_token_without_a_start_is_counted_and_changes_nothing(
    server: RunningServer, client: DispatcherClient, real: dict[str, tuple[int, str]],
) -> None:
    message = request(T + 1, fresh_cluster(), late_e=True)
    message.queued_jobs[2].promise_token = real["B"][1]  # B's token, without its start
    before = refused(server, "malformed")
    assert plan(client.dispatch(message)) == plan(
        client.dispatch(request(T + 1, fresh_cluster(), late_e=True)))
    assert refused(server, "malformed") == before + 1


def test_a_real_promise_sent_back_keeps_its_start_exactly(
    server: RunningServer, client: DispatcherClient, real: dict[str, tuple[int, str]],
) -> None:
    """On the cluster it was issued for, where the book has moved on (E arrived): B keeps
    T + 2,000, E goes after it, and the same promise comes back with the same token (B's
    changes: it signs the older promises, and E, submitted before B, holds one now)."""
    reasons = ("missing", "malformed", "invalid", "expired", "older", "reshaped")
    before = sum(refused(server, reason) for reason in reasons)
    answer = client.dispatch(request(T + 1, "issued", real, late_e=True))
    assert plan(answer) == ([], [("A", T + 1000, True, 0), ("B", T + 2000, True, 0),
                                 ("E", T + 4000, True, 0)])
    assert promises(answer)["A"] == real["A"] and promises(answer)["B"][0] == real["B"][0]
    after = sum(refused(server, reason) for reason in reasons)
    assert after == before


def test_an_expired_token_is_ignored_and_counted(serve: Callable[..., RunningServer]) -> None:
    """With promise_token_ttl_seconds 100, B's token (promised T + 2,000) is good until
    T + 2,100 and refused from T + 2,101 (r still running, past its requested time: A's and
    B's promises moved, B not due). Promises are made at the requested times (issue #49): a
    requested time of r beyond its expected end would let B start at once, promised nothing."""
    server = serve(promise_token_ttl_seconds=100)
    cluster = fresh_cluster()
    with DispatcherClient(server.target) as client:
        real = promises(client.dispatch(request(T, cluster)))
        b = {"B": real["B"]}
        client.dispatch(request(T + 2100, cluster, b))
        assert refused(server, "expired") == 0 and refused(server, "invalid") == 0
        late = client.dispatch(request(T + 2101, cluster, b))
        assert refused(server, "expired") == 1
        # The same decision again (a retry at the same t starts from the same book), B sent
        # without a promise.
        honest = client.dispatch(request(T + 2101, cluster))
    assert plan(late) == plan(honest)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "unary"])
def test_sessions_believe_only_the_promises_the_server_signed(
    stream: bool, server: RunningServer, real: dict[str, tuple[int, str]],
) -> None:
    """OpenSession's snapshot and a delta's submitted jobs go through the same check: B's
    forged promise at open, then a new job F submitted with A's token and start now (believed,
    F would start at once), are ignored and counted; a session opened with the real promises
    keeps them (B at T + 2,000 ahead of E)."""
    before = {r: refused(server, r) for r in ("missing", "invalid")}
    cluster = fresh_cluster()
    with DispatcherClient(server.target, timeout=60) as client:
        session = client.session(stream=stream)
        opened = session.decide(request(T + 1, cluster, {"B": (T + 1, "")}, late_e=True))
        assert refused(server, "missing") == before["missing"] + 1
        with_f = request(T + 2, cluster, late_e=True)
        with_f.queued_jobs.add(id="F", submit_time=T + 2, units=1, unit_request={"core": 4},
                               requested_time=2000, promised_start=T + 2,
                               promise_token=real["A"][1])
        submitted = session.decide(with_f)
        assert session.deltas == 1 and refused(server, "invalid") == before["invalid"] + 1
        session.close()
        kept_session = client.session(stream=stream)
        kept = kept_session.decide(request(T + 2, "issued", real, late_e=True))
        kept_session.close()
    assert plan(opened)[0] == [] and plan(submitted)[0] == []
    assert ("B", T + 3000, True, 0) in plan(submitted)[1]
    assert ("B", T + 2000, True, 0) in plan(kept)[1]
    assert refused(server, "invalid") == before["invalid"] + 1
    assert refused(server, "missing") == before["missing"] + 1
