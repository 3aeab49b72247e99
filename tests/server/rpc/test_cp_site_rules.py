"""A site's own rules in the three CP models (issue #50, item 2) through a real gRPC server on
loopback, under the papers' profile and the promise book's: a restricted job starts only on the
nodes its partitions and features allow, nothing starts into a window that does not admit it,
and the answer is the model's own (never the checked fallback); the workload manager's priority
decides which job starts when only one fits (the objective's w_i, `cp_schedule`)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest

from hpcdispatch.client import DispatcherClient
from hpcdispatch.decision_check import check_decision
from hpcdispatch.proto_convert import decision_from_pb, snapshot_from_pb
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.server.rpc.test_site_rules import T, _window, cluster, job, placed

CP_MODELS = ("pcp20", "pcp19", "hcp19")
PROFILES = ("papers", "book")


def _ask(client: DispatcherClient, request: pb.DispatchRequest, name: str, profile: str
         ) -> pb.DispatchResponse:
    request.dispatcher_name = name
    request.search.profile = profile
    request.search.deterministic = True  # the same search however busy the machine is
    response = client.dispatch(request)
    assert response.report.status != pb.SOLVE_STATUS_FALLBACK, response.report.fallback_reason
    assert not response.report.fallback_reason
    assert check_decision(snapshot_from_pb(request), decision_from_pb(response)) == []
    return response


def _with_a_wide_head(request: pb.DispatchRequest) -> pb.DispatchRequest:
    """c1 busy until t + 990 and the oldest job, "wide", asking for all four nodes: it cannot
    start now and holds the book's promise (EASY's head) from t + 990 on, so that under the
    book too the model decides what starts now around it (the book's first step does not
    decide alone)."""
    request.running_jobs.add(id="r", user="u", start_time=T - 10, requested_time=1000,
                             units=[pb.UnitAllocation(node_id="c1", amounts={"core": 4})])
    job(request, "wide", units=4, submit=T - 400)
    return request


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("name", CP_MODELS)
def test_a_cp_model_starts_restricted_jobs_only_on_their_nodes(
        client: DispatcherClient, name: str, profile: str) -> None:
    """g1 alone has "nvlink", c0 alone is a free "cpu" node, g0 is the a100 node left: each
    job has one place, and a list schedule's best fit would pick another (the smallest node
    numbers first, c0 for the nvlink job)."""
    request = _with_a_wide_head(cluster())
    job(request, "gpu-job", required_features=["nvlink"], submit=T - 300)
    job(request, "cpu-job", cores=2, units=2, partitions=["cpu"], submit=T - 200)
    job(request, "either", partitions=["cpu", "gpu"], required_features=["a100"],
        submit=T - 100)
    starts = placed(_ask(client, request, name, profile))
    assert starts == {"gpu-job": {"g1"}, "cpu-job": {"c0"}, "either": {"g0"}}


@pytest.mark.parametrize("capacity_first", (False, True))
@pytest.mark.parametrize("name", CP_MODELS)
def test_easys_head_discipline_starts_the_oldest_jobs_on_their_nodes(
        client: DispatcherClient, name: str, capacity_first: bool) -> None:
    """EASY's head discipline (`easy_head`: the oldest jobs first, as EASY starts them; the
    retired `promises` and `packing` profiles, `qos` with these overrides) places them on
    their own nodes too (every job here is among them)."""
    request = cluster()
    request.search.easy_head = True
    request.search.capacity_first = capacity_first
    request.search.work_conserving = True
    job(request, "gpu-job", required_features=["nvlink"], submit=T - 300)
    job(request, "cpu-job", cores=2, units=2, partitions=["cpu"], submit=T - 200)
    job(request, "either", partitions=["cpu", "gpu"], required_features=["a100"],
        submit=T - 100)
    starts = placed(_ask(client, request, name, "qos"))
    assert starts["gpu-job"] == {"g1"}
    assert starts["cpu-job"] <= {"c0", "c1"}
    assert starts["either"] == {"g0"}


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("name", CP_MODELS)
def test_a_cp_model_starts_nothing_into_a_window_that_does_not_admit_it(
        client: DispatcherClient, name: str, profile: str) -> None:
    """c0, c1 and g0 under maintenance from t + 100; g1 reserved for alice from before t. Jobs
    of 200 s that neither admits start nowhere (a list schedule would start them on c0 and
    g0); one of 50 s ends before the maintenance; alice runs in her reservation."""
    windows = [_window(["c0", "c1", "g0"], T + 100, T + 5_000),
               _window(["g1"], T - 50, T + 5_000, users=["alice"])]
    request = _with_a_wide_head(cluster(windows=windows))
    job(request, "long", requested=200, submit=T - 300)
    job(request, "alice", requested=200, user="alice", submit=T - 250)
    job(request, "short", requested=50, submit=T - 200)
    job(request, "also-long", requested=200, submit=T - 100)
    starts = placed(_ask(client, request, name, profile))
    assert "long" not in starts and "also-long" not in starts
    assert starts["alice"] == {"g1"}
    assert starts["short"] <= {"c0", "g0"}


@pytest.mark.parametrize("name", CP_MODELS)
def test_priority_decides_which_job_starts_when_only_one_fits(
        client: DispatcherClient, name: str) -> None:
    """One node's room (g1) for one of three 4-core jobs of equal d_i: the oldest without
    priorities (the papers' objective), the highest priority with them."""
    def decide(priorities: Sequence[int]) -> set[str]:
        request = cluster()
        request.running_jobs.add(id="r", user="u", start_time=T - 10, requested_time=1000,
                                 units=[pb.UnitAllocation(node_id=n, amounts={"core": 4})
                                        for n in ("c0", "c1", "g0")])
        for k, priority in enumerate(priorities):
            job(request, f"j{k}", submit=T - 300 + 10 * k, priority=priority)
        return set(placed(_ask(client, request, name, "papers")))

    assert decide([0, 0, 0]) == {"j0"}
    assert decide([3, 3, 3]) == {"j0"}
    assert decide([1, 1, 9]) == {"j2"}
    assert decide([1, 5, 2]) == {"j1"}


# The general cases under the promise book (profile "book", every job promised from its
# arrival): the book's own steps (the due promises, what fits around them, the promises
# planned ahead) keep the rules too, with no wide oldest job deciding for them.
_book_clusters = itertools.count()


def _ask_the_book(client: DispatcherClient, request: pb.DispatchRequest, name: str
                  ) -> pb.DispatchResponse:
    """`request` under "book" with promise_after_s 0, on a cluster name of its own (no promise
    of another test is recalled)."""
    request.cluster = f"cp-site-rules-book-{next(_book_clusters)}"
    request.search.promise_after_s = 0
    return _ask(client, request, name, "book")


def _promised(response: pb.DispatchResponse) -> dict[str, int]:
    return {e.job_id: e.start_time for e in response.report.expected_starts if e.promised}


def _busy(request: pb.DispatchRequest, job_id: str, nodes: Sequence[str], ends: int) -> None:
    """A job holding every core of `nodes` until `ends` (its requested time)."""
    request.running_jobs.add(id=job_id, user="u", start_time=T - 10, requested_time=ends - T + 10,
                             units=[pb.UnitAllocation(node_id=n, amounts={"core": 4})
                                    for n in nodes])


@pytest.mark.parametrize("name", CP_MODELS)
def test_the_book_starts_restricted_jobs_only_on_their_nodes(
        client: DispatcherClient, name: str) -> None:
    """The idle cluster, each job with one place (as above), but no wide head: the book's
    own starts place them."""
    request = cluster()
    job(request, "gpu-job", required_features=["nvlink"], submit=T - 300)
    job(request, "cpu-job", cores=2, units=2, partitions=["cpu"], submit=T - 200)
    job(request, "either", partitions=["cpu", "gpu"], required_features=["a100"],
        submit=T - 100)
    starts = placed(_ask_the_book(client, request, name))
    assert starts["gpu-job"] == {"g1"}
    assert starts["cpu-job"] <= {"c0", "c1"}
    assert starts["either"] == {"g0"}


@pytest.mark.parametrize("name", CP_MODELS)
def test_the_book_promises_restricted_jobs_only_on_their_nodes(
        client: DispatcherClient, name: str) -> None:
    """The cpu nodes busy until T + 1,000, g0 until T + 300, g1 until T + 500: the cpu job is
    promised T + 1,000 and the nvlink job T + 500 (g0, free first, is neither's), the
    unrestricted job T + 300 on g0; nothing starts now."""
    request = cluster()
    _busy(request, "r-cpu", ("c0", "c1"), T + 1_000)
    _busy(request, "r-g0", ("g0",), T + 300)
    _busy(request, "r-g1", ("g1",), T + 500)
    job(request, "cpu-job", partitions=["cpu"], submit=T - 300)
    job(request, "nv-job", required_features=["nvlink"], submit=T - 200)
    job(request, "any", submit=T - 100)
    response = _ask_the_book(client, request, name)
    assert placed(response) == {}
    assert _promised(response) == {"cpu-job": T + 1_000, "nv-job": T + 500, "any": T + 300}


@pytest.mark.parametrize("name", CP_MODELS)
def test_the_book_promises_nothing_into_a_window_that_does_not_admit_it(
        client: DispatcherClient, name: str) -> None:
    """Every node busy until T + 300; g0 and g1 under maintenance over [T + 400, T + 5,000).
    Jobs of 600 s fit on c0 and c1 only from T + 300 (on g0 or g1 they would run into it); one
    of 50 s ends on a gpu node before it; a gpu job of 600 s waits for its end, T + 5,000."""
    request = cluster(windows=[_window(["g0", "g1"], T + 400, T + 5_000)])
    _busy(request, "r", ("c0", "c1", "g0", "g1"), T + 300)
    job(request, "a", submit=T - 400)
    job(request, "b", submit=T - 300)
    job(request, "gpu-job", partitions=["gpu"], submit=T - 200)
    job(request, "short", requested=50, submit=T - 100)
    response = _ask_the_book(client, request, name)
    assert placed(response) == {}
    assert _promised(response) == {"a": T + 300, "b": T + 300, "gpu-job": T + 5_000,
                                   "short": T + 300}
