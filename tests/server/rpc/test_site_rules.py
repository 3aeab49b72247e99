"""A site's own rules (issue #50, first part) through a real gRPC server on loopback: bad
partitions, features, priorities and windows are INVALID_ARGUMENT naming the field (Dispatch,
OpenSession, UpdateSession); FCFS and the EASY family start jobs only on nodes their partitions
and features allow and into no window that does not admit them, in priority order (submit order
within equal priority, and as before without priorities); and a plugin's decision that breaks
any of these is refused by the independent check and answered by the checked fallback, on a
Dispatch and on a session's state (its node labels and windows changed by deltas)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from hpcdispatch.client import DispatcherClient
from hpcdispatch.decision_check import check_decision
from hpcdispatch.proto_convert import decision_from_pb, snapshot_from_pb
from hpcdispatch.server.dispatchers import DISPATCHERS
from hpcdispatch.server.dispatchers.base import Outcome, SearchControl
from hpcdispatch.server.dispatchers.planning.problem import Problem
from hpcdispatch.server.domain.outcome_kinds import SolveStatus
from hpcdispatch.server.rpc.app import RunningServer
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc

T = 10_000
WAIT = 60.0  # seconds: bounds calls of milliseconds; reached only when something is broken
EASY_FAMILY = ("fcfs", "easy", "easy-sjf", "easy-wfp3", "easy-unicef", "easy-f1", "easy-sjbf",
               "easy-lxf", "los")
# Every dispatcher that plans with the backfill base, in priority order.
BACKFILLING = (*EASY_FAMILY[1:], "easy-k", "conservative")


def cluster(*, windows: Sequence[pb.UnavailabilityWindow] = ()) -> pb.DispatchRequest:
    """Four idle 4-core nodes: c0, c1 in partition "cpu"; g0, g1 in partition "gpu" with the
    feature "a100" (g1 also "nvlink")."""
    request = pb.DispatchRequest(time=T, predictor=pb.PREDICTOR_WALLTIME)
    for node_id, partition, features in (("c0", "cpu", ()), ("c1", "cpu", ()),
                                         ("g0", "gpu", ("a100",)),
                                         ("g1", "gpu", ("a100", "nvlink"))):
        request.nodes.add(id=node_id, state=pb.NODE_STATE_UP, capacity={"core": 4},
                          partitions=[partition], features=features)
    request.windows.extend(windows)
    return request


def job(request: pb.DispatchRequest, job_id: str, *, cores: int = 4, units: int = 1,
        requested: int = 600, submit: int = T - 100, **rules: object) -> pb.QueuedJob:
    return request.queued_jobs.add(id=job_id, user=str(rules.pop("user", "u")),
                                   submit_time=submit, units=units,
                                   unit_request={"core": cores}, requested_time=requested,
                                   **rules)


def placed(response: pb.DispatchResponse) -> dict[str, set[str]]:
    return {s.job_id: {u.node_id for u in s.units} for s in response.starts}


def violations(call: Callable[[], object]) -> tuple[grpc.StatusCode, list[str]]:
    with pytest.raises(grpc.RpcError) as info:
        call()
    error = info.value
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None, "rich status expected"
    fields = []
    for detail in status.details:
        bad = error_details_pb2.BadRequest()
        assert detail.Unpack(bad)
        fields.extend(v.field for v in bad.field_violations)
    return error.code(), fields  # type: ignore[attr-defined]


# -- validation ----------------------------------------------------------------------------

def _window(nodes: Sequence[str], start: int, end: int, **who: Sequence[str]
            ) -> pb.UnavailabilityWindow:
    return pb.UnavailabilityWindow(node_ids=nodes, start_time=start, end_time=end, **who)


BAD_SNAPSHOTS: dict[str, tuple[Callable[[pb.DispatchRequest], None], str]] = {
    "a window ending at its start": (
        lambda r: r.windows.append(_window(["c0"], T + 10, T + 10)), "windows[0].end_time"),
    "a window ending before its start": (
        lambda r: r.windows.append(_window(["c0"], T + 10, T)), "windows[0].end_time"),
    "a window on an unknown node": (
        lambda r: r.windows.append(_window(["c0", "x9"], T, T + 10)), "windows[0].node_ids[1]"),
    "a window on no node": (
        lambda r: r.windows.append(_window([], T, T + 10)), "windows[0].node_ids"),
    "a window naming a node twice": (
        lambda r: r.windows.append(_window(["c0", "c0"], T, T + 10)), "windows[0].node_ids[1]"),
    "a window beyond the time range": (
        lambda r: r.windows.append(_window(["c0"], T, 2**41)), "windows[0].end_time"),
    "a window's empty user name": (
        lambda r: r.windows.append(_window(["c0"], T, T + 10, users=[""])),
        "windows[0].users[0]"),
    "a negative priority": (lambda r: setattr(r.queued_jobs[0], "priority", -1),
                            "queued_jobs[0].priority"),
    "a priority beyond 2^40": (lambda r: setattr(r.queued_jobs[0], "priority", 2**41),
                               "queued_jobs[0].priority"),
    "an empty partition name of a job": (lambda r: r.queued_jobs[0].partitions.append(""),
                                         "queued_jobs[0].partitions[0]"),
    "a feature required twice": (
        lambda r: r.queued_jobs[0].required_features.extend(["a100", "a100"]),
        "queued_jobs[0].required_features[1]"),
    "an empty partition name of a node": (lambda r: r.nodes[1].partitions.append(""),
                                          "nodes[1].partitions[1]"),
    "more node features than max_labels": (
        lambda r: r.nodes[0].features.extend(f"f{k}" for k in range(65)), "nodes[0].features"),
    "an account beyond max_id_chars": (lambda r: setattr(r.queued_jobs[0], "account", "a" * 257),
                                       "queued_jobs[0].account"),
}


@pytest.mark.parametrize("case", sorted(BAD_SNAPSHOTS))
def test_bad_site_rules_are_invalid_argument_naming_the_field(
        client: DispatcherClient, case: str) -> None:
    mutate, field = BAD_SNAPSHOTS[case]
    request = cluster()
    job(request, "j")
    mutate(request)
    code, fields = violations(lambda: client.dispatch(request))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert field in fields, fields


def test_a_valid_snapshot_with_every_rule_is_answered(client: DispatcherClient) -> None:
    """The fast intake (node table, running-job cache) takes the rules as the reference does:
    twice the same snapshot, both answered alike and checked."""
    request = cluster(windows=[_window(["c0"], T + 50, T + 90, users=["alice"],
                                       accounts=["physics"])])
    request.dispatcher_name = "easy"
    job(request, "j", priority=7, partitions=["cpu", "gpu"], required_features=["a100"],
        account="physics")
    first, second = client.dispatch(request), client.dispatch(request)
    assert placed(first) == placed(second) == {"j": {"g0"}}


def test_a_job_no_node_can_satisfy_is_accepted_and_never_starts(
        client: DispatcherClient) -> None:
    """Not an error (a node of its partition may join or come back): it never starts and
    never blocks FCFS's queue (SKIP_REASON_NEVER_FITS)."""
    request = cluster()
    job(request, "nowhere", partitions=["bigmem"], submit=T - 300)
    job(request, "no-feature", required_features=["a100", "fpga"], submit=T - 200)
    job(request, "later", submit=T - 100)
    request.dispatcher_name = "fcfs"
    response = client.dispatch(request)
    assert set(placed(response)) == {"later"}
    skipped = {s.job_id: s.reason for s in response.report.skipped_jobs}
    assert skipped == {"nowhere": pb.SKIP_REASON_NEVER_FITS,
                       "no-feature": pb.SKIP_REASON_NEVER_FITS}


# -- what FCFS and the EASY family start now -----------------------------------------------

@pytest.mark.parametrize("name", EASY_FAMILY)
def test_jobs_start_only_on_nodes_their_partitions_and_features_allow(
        client: DispatcherClient, name: str) -> None:
    request = cluster()
    request.dispatcher_name = name
    job(request, "gpu-job", required_features=["nvlink"], submit=T - 300)
    job(request, "cpu-job", cores=2, units=2, partitions=["cpu"], submit=T - 200)
    job(request, "either", partitions=["cpu", "gpu"], required_features=["a100"],
        submit=T - 100)
    response = client.dispatch(request)
    assert not response.report.fallback_reason
    starts = placed(response)
    assert starts["gpu-job"] == {"g1"}
    assert starts["cpu-job"] <= {"c0", "c1"}
    assert starts["either"] == {"g0"}
    assert check_decision(snapshot_from_pb(request), decision_from_pb(response)) == []


@pytest.mark.parametrize("name", EASY_FAMILY)
def test_nothing_starts_into_a_window_that_does_not_admit_it(
        client: DispatcherClient, name: str) -> None:
    """c0, c1 and g0 under maintenance from t + 100; g1 reserved for alice and the account
    "physics". A job of 200 s that neither admits starts nowhere (and blocks no other, FCFS's
    queue included: it fits what is free, not where its rules allow); one of 50 s ends before
    the maintenance; alice runs in her reservation."""
    windows = [_window(["c0", "c1", "g0"], T + 100, T + 5_000),
               _window(["g1"], T - 50, T + 5_000, users=["alice"], accounts=["physics"])]
    request = cluster(windows=windows)
    request.dispatcher_name = name
    job(request, "long", requested=200, submit=T - 300)
    job(request, "alice", requested=200, user="alice", submit=T - 250)
    job(request, "short", requested=50, submit=T - 200)
    job(request, "also-long", requested=200, submit=T - 100)
    response = client.dispatch(request)
    assert not response.report.fallback_reason
    starts = placed(response)
    assert "long" not in starts and "also-long" not in starts
    assert starts["alice"] == {"g1"}
    assert starts["short"] <= {"c0", "c1", "g0"}
    assert check_decision(snapshot_from_pb(request), decision_from_pb(response)) == []


@pytest.mark.parametrize("name", EASY_FAMILY)
def test_an_idle_cluster_under_maintenance_starts_nothing_and_says_no_fallback(
        client: DispatcherClient, name: str) -> None:
    """Nothing runs and the job fits what is free, but every node goes into maintenance before
    it would end: starting nothing is the decision itself, not a dispatcher left idle."""
    request = cluster(windows=[_window(["c0", "c1", "g0", "g1"], T + 10, T + 100)])
    request.dispatcher_name = name
    job(request, "j", requested=600)
    response = client.dispatch(request)
    assert not response.starts
    assert response.report.status == pb.SOLVE_STATUS_HEURISTIC
    assert not response.report.fallback_reason


@pytest.mark.parametrize("name", EASY_FAMILY)
def test_a_window_that_ended_or_admits_the_job_changes_nothing(
        client: DispatcherClient, name: str) -> None:
    request = cluster(windows=[_window(["c0", "c1", "g0", "g1"], T - 500, T),
                               _window(["c0", "c1", "g0", "g1"], T, T + 10_000,
                                       accounts=["physics"])])
    request.dispatcher_name = name
    for k in range(4):
        job(request, f"j{k}", account="physics", submit=T - 100 + k)
    assert len(placed(client.dispatch(request))) == 4


def only_g1_free(name: str) -> pb.DispatchRequest:
    """`cluster()` for `name` with c0, c1 and g0 busy until t + 990: one node's room, g1."""
    request = cluster()
    request.dispatcher_name = name
    request.running_jobs.add(id="r", user="u", start_time=T - 10, requested_time=1000,
                             units=[pb.UnitAllocation(node_id=n, amounts={"core": 4})
                                    for n in ("c0", "c1", "g0")])
    return request


@pytest.mark.parametrize("name", ("fcfs", *BACKFILLING))
def test_priority_orders_the_queue_and_submit_order_breaks_ties(
        client: DispatcherClient, name: str) -> None:
    """One node's room for one 4-core job: the highest priority starts, the oldest of equal
    priority; without priorities, the oldest (submit order, as before). The jobs are alike, so
    a queue order's own score (SJF, WFP3, ...) ties too: priority decides."""
    def decide(priorities: Sequence[int]) -> set[str]:
        request = only_g1_free(name)
        for k, priority in enumerate(priorities):
            job(request, f"j{k}", submit=T - 300 + 10 * k, priority=priority)
        return set(placed(client.dispatch(request)))

    assert decide([0, 0, 0]) == {"j0"}
    assert decide([1, 5, 5]) == {"j1"}
    assert decide([1, 2, 9]) == {"j2"}


@pytest.mark.parametrize("name", BACKFILLING)
def test_backfill_candidates_are_tried_in_priority_order(
        client: DispatcherClient, name: str) -> None:
    """One node free until the running work ends at t + 990, and a two-node head. Two jobs
    would backfill there, one at a time: "short" (100 s, the older, the shortest, the largest
    expansion factor: first in every order's own score) and "long" (500 s). With priorities,
    the higher one is tried first, whatever the order's score (SJBF's, LXF's, SJF's, ...);
    without, the order's own choice, "short"."""
    def decide(priorities: tuple[int, int, int]) -> set[str]:
        request = only_g1_free(name)
        wide, short, long = priorities
        job(request, "wide", units=2, requested=2000, submit=T - 300, priority=wide)
        job(request, "short", requested=100, submit=T - 200, priority=short)
        job(request, "long", requested=500, submit=T - 100, priority=long)
        response = client.dispatch(request)
        assert not response.report.fallback_reason
        assert check_decision(snapshot_from_pb(request), decision_from_pb(response)) == []
        return set(placed(response))

    assert decide((0, 0, 0)) == {"short"}
    assert decide((9, 0, 5)) == {"long"}


# -- the independent check, on a plugin's decisions ----------------------------------------

class Placing:
    """A plugin's dispatcher standing in for FCFS: every queued job on the node `node_id`."""

    name = "placing"

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id

    def decide(self, problem: Problem, control: SearchControl) -> Outcome:
        node = list(problem.node_ids).index(self.node_id)
        return Outcome(placements={j.index: [node] * j.units for j in problem.jobs},
                       status=SolveStatus.HEURISTIC)


@pytest.fixture
def plug_in(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    def plug(node_id: str) -> None:
        monkeypatch.setitem(DISPATCHERS, pb.DISPATCHER_FCFS, Placing(node_id))
    return plug


REFUSED: dict[str, tuple[str, dict[str, object], Sequence[pb.UnavailabilityWindow], str]] = {
    # (the node the plugin places on, the job's rules, the windows, what the check says)
    "outside its partitions": ("c0", {"partitions": ["gpu"]}, (), "outside its partitions"),
    "lacking a required feature": ("g0", {"required_features": ["nvlink"]}, (),
                                   "lacking one of its required features"),
    "into a maintenance window": ("c0", {}, (_window(["c0"], T + 300, T + 400),),
                                  "unavailability window"),
    "into another user's reservation": (
        "c0", {"user": "bob"}, (_window(["c0"], T - 10, T + 400, users=["alice"]),),
        "unavailability window"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_plugins_start_that_breaks_a_rule_is_refused(
        client: DispatcherClient, plug_in: Callable[[str], None], case: str) -> None:
    node_id, rules, windows, said = REFUSED[case]
    plug_in(node_id)
    request = cluster(windows=windows)
    request.dispatcher = pb.DISPATCHER_FCFS
    job(request, "j", requested=600, **rules)
    response = client.dispatch(request)
    assert response.report.status == pb.SOLVE_STATUS_FALLBACK
    assert "failed the check" in response.report.fallback_reason
    assert said in response.report.fallback_reason
    assert node_id not in placed(response).get("j", set())
    assert check_decision(snapshot_from_pb(request), decision_from_pb(response)) == []


def test_a_plugins_start_within_the_rules_is_answered(
        client: DispatcherClient, plug_in: Callable[[str], None]) -> None:
    """The same plugin, on a node the rules allow (a reservation admitting the job's
    account): its decision is the answer."""
    plug_in("g1")
    request = cluster(windows=[_window(["g1"], T, T + 400, accounts=["physics"])])
    request.dispatcher = pb.DISPATCHER_FCFS
    job(request, "j", partitions=["gpu"], required_features=["a100"], account="physics")
    response = client.dispatch(request)
    assert response.report.status == pb.SOLVE_STATUS_HEURISTIC
    assert placed(response) == {"j": {"g1"}}


@pytest.fixture
def sessions(server: RunningServer) -> Iterator[pb_grpc.SessionServiceStub]:
    with grpc.insecure_channel(server.target) as channel:
        yield pb_grpc.SessionServiceStub(channel)


def test_a_session_checks_its_own_labels_and_windows(
        sessions: pb_grpc.SessionServiceStub, plug_in: Callable[[str], None]) -> None:
    """A session's decisions are checked against the state its deltas made (ClusterFacts of
    the session): a window set by a delta, a node's labels changed by one, and the windows'
    and labels' bad input refused naming the delta's field, the session unchanged."""
    request = cluster()
    opened = sessions.OpenSession(pb.OpenSessionRequest(snapshot=request), timeout=WAIT)
    sid = opened.session_id
    plug_in("c0")

    def update(sequence: int, **fields: object) -> pb.UpdateSessionResponse:
        delta = pb.UpdateSessionRequest(session_id=sid, sequence=sequence, time=T,
                                        dispatcher=pb.DISPATCHER_FCFS, decide=True,
                                        predictor=pb.PREDICTOR_WALLTIME, **fields)
        response: pb.UpdateSessionResponse = sessions.UpdateSession(delta, timeout=WAIT)
        return response

    def refused(sequence: int, **fields: object) -> list[str]:
        code, found = violations(lambda: update(sequence, **fields))
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        return found

    maintenance = pb.UnavailabilityWindows(windows=[_window(["c0"], T + 100, T + 200)])
    submitted = [pb.QueuedJob(id="j", user="u", submit_time=T - 10, units=1,
                              unit_request={"core": 4}, requested_time=600)]
    first = update(1, windows=maintenance, submitted=submitted).decision
    assert first.report.status == pb.SOLVE_STATUS_FALLBACK
    assert "unavailability window" in first.report.fallback_reason
    assert "c0" not in placed(first)["j"]

    assert refused(2, windows=pb.UnavailabilityWindows(
        windows=[_window(["x9"], T, T + 10)])) == ["windows.windows[0].node_ids[0]"]
    assert refused(2, node_changes=[pb.NodeChange(
        id="c0", state=pb.NODE_STATE_UP, labels=pb.NodeLabels(partitions=[""]))]) == [
        "node_changes[0].labels.partitions[0]"]

    cleared = update(2, windows=pb.UnavailabilityWindows()).decision  # windows cleared
    assert cleared.report.status == pb.SOLVE_STATUS_HEURISTIC
    assert placed(cleared) == {"j": {"c0"}}

    # c0 joins partition "gpu" only: the job, now asking for "cpu", may not use it.
    relabel = [pb.NodeChange(id="c0", state=pb.NODE_STATE_UP,
                             labels=pb.NodeLabels(partitions=["gpu"]))]
    resubmitted = [pb.QueuedJob(id="j", user="u", submit_time=T - 10, units=1,
                                unit_request={"core": 4}, requested_time=600,
                                partitions=["cpu"])]
    moved = update(3, node_changes=relabel, cancelled_job_ids=["j"],
                   submitted=resubmitted).decision
    assert moved.report.status == pb.SOLVE_STATUS_FALLBACK
    assert "outside its partitions" in moved.report.fallback_reason
    assert placed(moved) == {"j": {"c1"}}
    sessions.CloseSession(pb.CloseSessionRequest(session_id=sid), timeout=WAIT)
