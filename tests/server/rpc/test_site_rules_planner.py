"""A site's own rules in what is planned ahead (issue #50 item 2, the planner), through a real
gRPC server on loopback: EASY's head reservation, EASY-k's and conservative's reservations and
the promise book's promises (PCP'20, profile "book") are made only on nodes the job's
partitions and features allow, never into a window that does not admit it (after it, or on
other nodes), in priority order (submit order within equal priority); backfill never crosses
a partition; a window that appears later moves a promise past it, reported with its reason.
Every answer is also checked by the independent check (hpcdispatch.decision_check), and none
is a fallback. Each expected start below is exact: the predictor is `walltime`, so the running
work ends at its requested time, as the promises are planned.

The cluster (tests/server/rpc/test_site_rules.py's): c0, c1 in partition "cpu"; g0, g1 in
partition "gpu" with the feature "a100" (g1 also "nvlink"); four cores each."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import grpc
import pytest

from hpcdispatch.client import DispatcherClient
from hpcdispatch.decision_check import check_decision
from hpcdispatch.proto_convert import decision_from_pb, snapshot_from_pb
from hpcdispatch.server.rpc.app import RunningServer
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc
from tests.server.rpc.test_site_rules import WAIT, T, _window, cluster, job, placed

PLANNERS = ("easy", "easy-k", "conservative", "book")
_clusters = itertools.count()


def ask(client: DispatcherClient, name: str, request: pb.DispatchRequest
        ) -> pb.DispatchResponse:
    """`request` answered by `name` ("book": PCP'20 under the promise book, every job promised
    from its arrival), on a cluster name of its own (no book or kept plan of another test);
    the answer checked independently and no fallback."""
    request.cluster = f"site-rules-planner-{next(_clusters)}"
    if name == "book":
        request.dispatcher = pb.DISPATCHER_PCP20
        request.search.profile = "book"
        request.search.promise_after_s = 0
    else:
        request.dispatcher_name = name
    response = client.dispatch(request)
    assert not response.report.fallback_reason, response.report.fallback_reason
    assert check_decision(snapshot_from_pb(request), decision_from_pb(response)) == []
    return response


def expected(response: pb.DispatchResponse) -> dict[str, int]:
    return {e.job_id: e.start_time for e in response.report.expected_starts}


def running(request: pb.DispatchRequest, job_id: str, nodes: Sequence[str], ends: int) -> None:
    """A job holding every core of `nodes` until `ends` (its requested time)."""
    request.running_jobs.add(id=job_id, user="u", start_time=T - 10, requested_time=ends - T + 10,
                             units=[pb.UnitAllocation(node_id=n, amounts={"core": 4})
                                    for n in nodes])


@pytest.mark.parametrize("name", PLANNERS)
def test_a_restricted_head_reserves_on_its_partition_only(
        client: DispatcherClient, name: str) -> None:
    """The cpu nodes are busy until T + 1,000, g0 until T + 300, g1 is idle. The head may run
    on "cpu" only: it is reserved at T + 1,000 (on main, planned on any node: T + 300 on g0,
    or no reservation at all for EASY), and the job behind it starts on g1 now."""
    request = cluster()
    running(request, "r-cpu", ("c0", "c1"), T + 1_000)
    running(request, "r-g0", ("g0",), T + 300)
    job(request, "head", partitions=["cpu"], requested=600, submit=T - 300)
    job(request, "behind", requested=2_000, submit=T - 200)
    response = ask(client, name, request)
    assert placed(response) == {"behind": {"g1"}}
    assert expected(response)["head"] == T + 1_000


@pytest.mark.parametrize("name", PLANNERS)
def test_backfill_never_crosses_partitions(client: DispatcherClient, name: str) -> None:
    """The gpu nodes are busy until T + 500, the cpu nodes idle: the gpu job waits for its
    own partition (reserved at T + 500) and never backfills onto a cpu node; the cpu job
    starts on one."""
    request = cluster()
    running(request, "r-gpu", ("g0", "g1"), T + 500)
    job(request, "gpu-job", partitions=["gpu"], requested=100, submit=T - 300)
    job(request, "cpu-job", partitions=["cpu"], requested=100, submit=T - 200)
    job(request, "a100-job", required_features=["a100"], requested=100, submit=T - 100)
    response = ask(client, name, request)
    starts = placed(response)
    assert set(starts) == {"cpu-job"}
    assert starts["cpu-job"] <= {"c0", "c1"}
    assert expected(response)["gpu-job"] == T + 500


@pytest.mark.parametrize("name", PLANNERS)
def test_nothing_starts_or_is_planned_into_a_maintenance_window(
        client: DispatcherClient, name: str) -> None:
    """Every node under maintenance over [T + 100, T + 400): the 600 s job is planned at its
    end, T + 400 (on main it started into the window, or waited without a reservation); the
    50 s job ends before it and starts now."""
    request = cluster(windows=[_window(["c0", "c1", "g0", "g1"], T + 100, T + 400)])
    job(request, "long", requested=600, submit=T - 300)
    job(request, "short", requested=50, submit=T - 200)
    response = ask(client, name, request)
    assert set(placed(response)) == {"short"}
    assert expected(response)["long"] == T + 400


@pytest.mark.parametrize("name", PLANNERS)
def test_a_window_on_some_nodes_plans_the_job_on_the_others(
        client: DispatcherClient, name: str) -> None:
    """c0, c1 and g0 under maintenance from T + 100 to T + 5,000; g1 busy until T + 200: the
    600 s job is planned on g1 at T + 200, not after the window; a 50 s job starts now (it
    ends before the maintenance)."""
    request = cluster(windows=[_window(["c0", "c1", "g0"], T + 100, T + 5_000)])
    running(request, "r-g1", ("g1",), T + 200)
    job(request, "long", requested=600, submit=T - 300)
    job(request, "short", requested=50, submit=T - 200)
    response = ask(client, name, request)
    assert set(placed(response)) == {"short"}
    assert expected(response)["long"] == T + 200


@pytest.mark.parametrize("name", PLANNERS)
def test_admitted_users_run_inside_a_reservation_window(
        client: DispatcherClient, name: str) -> None:
    """Every node reserved for alice until T + 5,000: her job starts now, bob's is planned at
    the reservation's end."""
    request = cluster(windows=[_window(["c0", "c1", "g0", "g1"], T - 10, T + 5_000,
                                       users=["alice"])])
    job(request, "bob", user="bob", requested=600, submit=T - 300)
    job(request, "alice", user="alice", requested=600, submit=T - 200)
    response = ask(client, name, request)
    assert placed(response).keys() == {"alice"}
    assert expected(response)["bob"] == T + 5_000


@pytest.mark.parametrize("name", PLANNERS)
def test_priority_orders_the_reservations(client: DispatcherClient, name: str) -> None:
    """Two gpu jobs, the gpu nodes busy (g1 until T + 200, g0 until T + 1,000), the cpu nodes
    idle. The higher priority is reserved first, at T + 200 on g1 (the other, if it is
    planned, later); with equal priorities, the older."""
    def decide(older: int, newer: int) -> dict[str, int]:
        request = cluster()
        running(request, "r-g0", ("g0",), T + 1_000)
        running(request, "r-g1", ("g1",), T + 200)
        job(request, "older", partitions=["gpu"], requested=900, submit=T - 300,
            priority=older)
        job(request, "newer", partitions=["gpu"], requested=900, submit=T - 200,
            priority=newer)
        response = ask(client, name, request)
        assert not response.starts
        return expected(response)

    first = decide(1, 5)
    assert first["newer"] == T + 200
    assert first.get("older", T + 1_000) > T + 200
    tie = decide(3, 3)
    assert tie["older"] == T + 200
    assert tie.get("newer", T + 1_000) > T + 200


def test_a_window_added_later_moves_a_promise_past_it_with_the_reason(
        client: DispatcherClient) -> None:
    """The book promises the job T + 300 (every node busy until then); at the next decision,
    the token sent back, maintenance covers every node over [T + 250, T + 2,000): the promise
    moves to T + 2,000, reported moved later by 1,700 s because of the window."""
    def at(t: int, promise: pb.ExpectedStart | None,
           windows: Sequence[pb.UnavailabilityWindow] = ()) -> pb.DispatchRequest:
        request = cluster(windows=windows)
        request.time = t
        request.cluster = "site-rules-planner-moved"
        request.dispatcher = pb.DISPATCHER_PCP20
        request.search.profile = "book"
        request.search.promise_after_s = 0
        running(request, "r", ("c0", "c1", "g0", "g1"), T + 300)
        queued = job(request, "j", requested=600, submit=T - 100)
        if promise is not None:
            queued.promised_start = promise.start_time
            queued.promise_token = promise.promise_token
        return request

    first = client.dispatch(at(T, None))
    (promise,) = first.report.expected_starts
    assert (promise.job_id, promise.start_time, promise.promised) == ("j", T + 300, True)
    later = at(T + 10, promise, [_window(["c0", "c1", "g0", "g1"], T + 250, T + 2_000)])
    second = client.dispatch(later)
    assert not second.report.fallback_reason
    (moved,) = second.report.expected_starts
    assert (moved.start_time, moved.promised) == (T + 2_000, True)
    assert moved.moved_later_seconds == 1_700
    assert moved.move_reason == pb.PROMISE_MOVE_REASON_WINDOW
    assert check_decision(snapshot_from_pb(later), decision_from_pb(second)) == []


@pytest.fixture
def sessions(server: RunningServer) -> Iterator[pb_grpc.SessionServiceStub]:
    with grpc.insecure_channel(server.target) as channel:
        yield pb_grpc.SessionServiceStub(channel)


def test_a_window_set_by_a_session_delta_moves_a_promise_past_it_with_the_reason(
        sessions: pb_grpc.SessionServiceStub) -> None:
    """The same move on a session: its book promises the job T + 300; a delta that sets a
    maintenance window on every node over [T + 250, T + 2,000) moves the promise to
    T + 2,000, moved later by 1,700 s because of the window."""
    request = cluster()
    running(request, "r", ("c0", "c1", "g0", "g1"), T + 300)
    opened = sessions.OpenSession(pb.OpenSessionRequest(snapshot=request), timeout=WAIT)
    search = pb.SearchParameters(profile="book", promise_after_s=0)

    def update(sequence: int, t: int, **fields: object) -> pb.DispatchResponse:
        delta = pb.UpdateSessionRequest(session_id=opened.session_id, sequence=sequence,
                                        time=t, dispatcher=pb.DISPATCHER_PCP20, decide=True,
                                        predictor=pb.PREDICTOR_WALLTIME, search=search,
                                        **fields)
        answer: pb.UpdateSessionResponse = sessions.UpdateSession(delta, timeout=WAIT)
        assert not answer.decision.report.fallback_reason
        return answer.decision

    submitted = [pb.QueuedJob(id="j", user="u", submit_time=T - 100, units=1,
                              unit_request={"core": 4}, requested_time=600)]
    (promise,) = update(1, T, submitted=submitted).report.expected_starts
    assert (promise.start_time, promise.promised) == (T + 300, True)
    maintenance = pb.UnavailabilityWindows(
        windows=[_window(["c0", "c1", "g0", "g1"], T + 250, T + 2_000)])
    (moved,) = update(2, T + 10, windows=maintenance).report.expected_starts
    assert (moved.start_time, moved.promised) == (T + 2_000, True)
    assert moved.moved_later_seconds == 1_700
    assert moved.move_reason == pb.PROMISE_MOVE_REASON_WINDOW
    sessions.CloseSession(pb.CloseSessionRequest(session_id=opened.session_id), timeout=WAIT)
