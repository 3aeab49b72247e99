"""A site's rules, the pieces the Slurm work found missing (issue #50), through a real gRPC server
on loopback: an OR of node features (`QueuedJob.feature_alternatives`, Slurm's
--constraint="a|b"), a job that must run inside a named reservation (`QueuedJob.reservation`,
`UnavailabilityWindow.name`, Slurm's --reservation=R) and a node back at a known time (sent up
with a window admitting nobody until then). Bad input is INVALID_ARGUMENT naming the field;
FCFS, the EASY family, the planners (EASY's head, EASY-k, conservative, the promise book) and the
three CP models start and plan only where these rules allow; a plugin's decision that breaks
them is refused by the independent check. Every answer is checked by hpcdispatch.decision_check.

The cluster: four idle 4-core nodes, n0 with feature "a", n1 with "b", n2 with "c", n3 with
"a" and "b". Predictor `walltime`, so every planned start below is exact."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import grpc
import pytest

from hpcdispatch.catalog import DISPATCHER_NAMES
from hpcdispatch.client import DispatcherClient
from hpcdispatch.decision_check import check_decision
from hpcdispatch.proto_convert import decision_from_pb, snapshot_from_pb
from hpcdispatch.server.dispatchers import DISPATCHERS
from hpcdispatch.server.rpc.app import RunningServer
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc
from tests.server.rpc.test_site_rules import (
    EASY_FAMILY,
    WAIT,
    Placing,
    T,
    placed,
    violations,
)
from tests.server.rpc.test_site_rules_planner import ask, expected

NOW_DISPATCHERS = ("fcfs", "easy", "easy-sjf", "easy-wfp3", "easy-unicef", "easy-f1",
                   "easy-sjbf", "easy-lxf", "los", "easy-k", "conservative", "pcp19", "hcp19",
                   "pcp20", "book")
PLANNERS = ("easy", "easy-k", "conservative", "book")


def cluster(*, windows: Sequence[pb.UnavailabilityWindow] = ()) -> pb.DispatchRequest:
    request = pb.DispatchRequest(time=T, predictor=pb.PREDICTOR_WALLTIME)
    for node_id, features in (("n0", ("a",)), ("n1", ("b",)), ("n2", ("c",)),
                              ("n3", ("a", "b"))):
        request.nodes.add(id=node_id, state=pb.NODE_STATE_UP, capacity={"core": 4},
                          features=features)
    request.windows.extend(windows)
    return request


def job(request: pb.DispatchRequest, job_id: str, *, requested: int = 600,
        submit: int = T - 100, alternatives: Sequence[Sequence[str]] = (),
        **rules: object) -> pb.QueuedJob:
    queued = request.queued_jobs.add(id=job_id, user=str(rules.pop("user", "u")),
                                     submit_time=submit, units=1, unit_request={"core": 4},
                                     requested_time=requested, **rules)
    for term in alternatives:
        queued.feature_alternatives.add(features=term)
    return queued


def window(nodes: Sequence[str], start: int, end: int, **who: object
           ) -> pb.UnavailabilityWindow:
    return pb.UnavailabilityWindow(node_ids=nodes, start_time=start, end_time=end, **who)


def running(request: pb.DispatchRequest, job_id: str, nodes: Sequence[str], ends: int) -> None:
    request.running_jobs.add(id=job_id, user="u", start_time=T - 10, requested_time=ends - T + 10,
                             units=[pb.UnitAllocation(node_id=n, amounts={"core": 4})
                                    for n in nodes])


def skipped(response: pb.DispatchResponse) -> dict[str, int]:
    return {s.job_id: s.reason for s in response.report.skipped_jobs}


# -- validation ----------------------------------------------------------------------------

def _terms(*terms: Sequence[str]) -> Callable[[pb.DispatchRequest], None]:
    def mutate(request: pb.DispatchRequest) -> None:
        for term in terms:
            request.queued_jobs[0].feature_alternatives.add(features=term)
    return mutate


BAD: dict[str, tuple[Callable[[pb.DispatchRequest], None], str]] = {
    "an empty feature term": (_terms(["a"], []), "queued_jobs[0].feature_alternatives[1].features"),
    "a feature twice in a term": (_terms(["a", "a"]),
                                  "queued_jobs[0].feature_alternatives[0].features[1]"),
    "an empty feature name in a term": (_terms(["a", ""]),
                                        "queued_jobs[0].feature_alternatives[0].features[1]"),
    "more terms than max_labels": (_terms(*([f"f{k}"] for k in range(65))),
                                   "queued_jobs[0].feature_alternatives"),
    "a reservation name beyond max_id_chars": (
        lambda r: setattr(r.queued_jobs[0], "reservation", "r" * 257),
        "queued_jobs[0].reservation"),
    "a window name beyond max_id_chars": (
        lambda r: r.windows.append(window(["n0"], T, T + 10, name="w" * 257)), "windows[0].name"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_terms_and_reservations_are_invalid_argument_naming_the_field(
        client: DispatcherClient, case: str) -> None:
    mutate, field = BAD[case]
    request = cluster()
    job(request, "j")
    mutate(request)
    code, fields = violations(lambda: client.dispatch(request))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert field in fields, fields


# -- an OR of features ---------------------------------------------------------------------

@pytest.mark.parametrize("name", NOW_DISPATCHERS)
def test_an_or_of_features_starts_only_on_nodes_with_one_term(
        client: DispatcherClient, name: str) -> None:
    """Three "a|b" jobs and one "c&a|b&c" job (no node has either term) on an idle cluster:
    the three take n0, n1 and n3, never n2; the other never fits. On main the OR was not in
    the contract: the jobs took any node, n2 included."""
    request = cluster()
    for k in range(3):
        job(request, f"ab{k}", alternatives=[["a"], ["b"]], submit=T - 300 + k)
    job(request, "nowhere", alternatives=[["c", "a"], ["b", "c"]], submit=T - 100)
    response = ask(client, name, request)
    starts = placed(response)
    assert set(starts) == {"ab0", "ab1", "ab2"}
    assert set().union(*starts.values()) == {"n0", "n1", "n3"}
    assert skipped(response).get("nowhere") == pb.SKIP_REASON_NEVER_FITS


@pytest.mark.parametrize("name", PLANNERS)
def test_an_or_of_features_is_reserved_on_its_nodes_only(
        client: DispatcherClient, name: str) -> None:
    """n0, n1, n3 busy until T + 500, n2 idle: the "a|b" head waits for them (planned at
    T + 500), the job behind it (required feature "c" and a term "c") starts on n2 now."""
    request = cluster()
    running(request, "r", ("n0", "n1", "n3"), T + 500)
    job(request, "head", alternatives=[["a"], ["b"]], submit=T - 300)
    job(request, "behind", required_features=["c"], alternatives=[["c"]], requested=2_000,
        submit=T - 200)
    response = ask(client, name, request)
    assert placed(response) == {"behind": {"n2"}}
    assert expected(response)["head"] == T + 500


# -- a job that must run inside a named reservation ------------------------------------------

@pytest.mark.parametrize("name", NOW_DISPATCHERS)
def test_a_reservation_job_runs_only_inside_its_reservation(
        client: DispatcherClient, name: str) -> None:
    """Reservation "R" on n0, n1 under way until T + 1,000, listing no user: the job asking
    for R starts on n0 or n1 (though all four nodes are idle, and its user is not listed),
    the job that does not ask for it starts elsewhere; a job asking for R longer than what
    is left of it, and one asking for an unknown reservation, never fit."""
    request = cluster(windows=[window(["n0", "n1"], T - 50, T + 1_000, name="R")])
    job(request, "in-r", reservation="R", requested=600, submit=T - 400)
    job(request, "plain", requested=600, submit=T - 300)
    job(request, "too-long", reservation="R", requested=2_000, submit=T - 200)
    job(request, "unknown", reservation="Q", requested=60, submit=T - 100)
    response = ask(client, name, request)
    starts = placed(response)
    assert set(starts) == {"in-r", "plain"}
    assert starts["in-r"] <= {"n0", "n1"}
    assert not starts["plain"] & {"n0", "n1"}
    assert skipped(response).get("too-long") == pb.SKIP_REASON_NEVER_FITS
    assert skipped(response).get("unknown") == pb.SKIP_REASON_NEVER_FITS


@pytest.mark.parametrize("name", NOW_DISPATCHERS)
def test_a_reservation_job_the_running_work_leaves_no_room_in_never_fits(
        client: DispatcherClient, name: str) -> None:
    """R on n0, n1 until T + 700, both busy until T + 200 (their requested times): a 600 s
    job of R cannot run inside R any more (it would end at T + 800), so it never fits and
    nothing is planned for it (before this check, the planners planned it at t + 2^40 s);
    a 400 s job of R does fit (T + 200 to T + 600) and is planned there."""
    request = cluster(windows=[window(["n0", "n1"], T - 50, T + 700, name="R")])
    running(request, "r", ("n0", "n1"), T + 200)
    job(request, "long-r", reservation="R", requested=600, submit=T - 300)
    job(request, "short-r", reservation="R", requested=400, submit=T - 200)
    response = ask(client, name, request)
    assert not placed(response)
    assert skipped(response).get("long-r") == pb.SKIP_REASON_NEVER_FITS
    assert "long-r" not in expected(response)
    if name in PLANNERS and name != "easy":  # EASY reserves only when something could backfill
        assert expected(response)["short-r"] == T + 200


@pytest.mark.parametrize("name", NOW_DISPATCHERS)
def test_a_reservation_job_waits_for_its_reservation_to_begin(
        client: DispatcherClient, name: str) -> None:
    """R on n0, n1 from T + 100 to T + 1,000: its job does not start now anywhere (idle nodes
    everywhere), a 50 s job that ends before R starts on any node."""
    request = cluster(windows=[window(["n0", "n1"], T + 100, T + 1_000, name="R")])
    job(request, "in-r", reservation="R", requested=600, submit=T - 300)
    job(request, "short", requested=50, submit=T - 200)
    starts = placed(ask(client, name, request))
    assert set(starts) == {"short"}


@pytest.mark.parametrize("name", PLANNERS)
def test_a_reservation_job_is_planned_at_its_reservations_start(
        client: DispatcherClient, name: str) -> None:
    """R on n0, n1 from T + 100: its job is planned at T + 100 (not now, not at T + 0 on n2
    or n3, which are idle), and a second R job after the first one's end is planned inside
    R too, at T + 100 on the other node."""
    request = cluster(windows=[window(["n0", "n1"], T + 100, T + 1_000, name="R")])
    job(request, "r0", reservation="R", requested=600, submit=T - 300)
    job(request, "r1", reservation="R", requested=600, submit=T - 250)
    response = ask(client, name, request)
    assert not placed(response)
    plan = expected(response)
    assert plan["r0"] == T + 100
    if name != "easy":  # EASY reserves for its head only
        assert plan["r1"] == T + 100


@pytest.mark.parametrize("name", PLANNERS)
def test_a_reservation_job_the_jobs_before_it_fill_is_planned_nowhere(
        client: DispatcherClient, name: str) -> None:
    """R on n0 until T + 1,000, n0 busy until T + 200: the first 600 s job of R is planned at
    T + 200, inside R; the second fits R with the running work alone, but the first fills
    it, so no start is planned for it in this plan: none is reported (before, the planners
    reported one at t + 2^40 s, marked promised), and its start is never promised."""
    request = cluster(windows=[window(["n0"], T - 50, T + 1_000, name="R")])
    running(request, "r", ("n0",), T + 200)
    job(request, "first-r", reservation="R", requested=600, submit=T - 300)
    job(request, "second-r", reservation="R", requested=600, submit=T - 200)
    job(request, "plain", requested=100, submit=T - 100)  # EASY reserves when one backfills
    response = ask(client, name, request)
    plan = {e.job_id: e for e in response.report.expected_starts}
    assert plan["first-r"].start_time == T + 200
    assert "second-r" not in plan, plan["second-r"]
    assert all(e.start_time < T + 2**39 for e in response.report.expected_starts)


@pytest.mark.parametrize("name", PLANNERS)
def test_a_reservation_of_two_spans_plans_its_job_in_the_one_it_fits(
        client: DispatcherClient, name: str) -> None:
    """R on n0 over [T - 10, T + 300) and again over [T + 500, T + 2,000): a 250 s job of R
    starts now inside the first span; a 600 s one fits only the second, planned at T + 500
    (never in the gap, never after)."""
    request = cluster(windows=[window(["n0"], T - 10, T + 300, name="R"),
                               window(["n0"], T + 500, T + 2_000, name="R")])
    job(request, "short-r", reservation="R", requested=250, submit=T - 300)
    job(request, "long-r", reservation="R", requested=600, submit=T - 200)
    job(request, "plain", requested=100, submit=T - 100)  # EASY reserves when one backfills
    response = ask(client, name, request)
    starts = placed(response)
    assert starts["short-r"] == {"n0"}
    assert "long-r" not in starts
    assert expected(response)["long-r"] == T + 500


@pytest.mark.parametrize("name", ("easy", "los", "easy-k", "conservative"))
@pytest.mark.parametrize("predictor", [pb.PREDICTOR_WALLTIME, pb.PREDICTOR_LAST_TWO,
                                       pb.PREDICTOR_DATA_DRIVEN])
def test_a_baselines_reservation_is_a_promise_only_under_walltime(
        client: DispatcherClient, name: str, predictor: pb.Predictor.ValueType) -> None:
    """n0..n2 busy until T + 200 at their requested times; the 2-node job is reserved at
    T + 200 and the 1-node job backfills on n3. Users without a history: every predictor
    gives each job its requested time in this decision. Only under walltime does every later
    decision plan so too, so only there is the reservation a promise; under a learning
    predictor a later decision planned on predictions may backfill past it (issue #49's
    21-pair frontier: EASY's such promises kept on 0-75 % of a pair's runs): an estimate."""
    request = cluster()
    request.predictor = predictor
    running(request, "r", ("n0", "n1", "n2"), T + 200)
    request.queued_jobs.add(id="wide", user="fresh-a", submit_time=T - 300, units=2,
                            unit_request={"core": 4}, requested_time=600)
    job(request, "short", requested=100, submit=T - 200, user="fresh-b")
    response = ask(client, name, request)
    assert placed(response) == {"short": {"n3"}}
    head = {e.job_id: e for e in response.report.expected_starts}["wide"]
    assert head.start_time == T + 200
    assert head.promised is (predictor == pb.PREDICTOR_WALLTIME)


class Reserving(Placing):
    name = "reserving"


@pytest.fixture
def plug_in(monkeypatch: pytest.MonkeyPatch) -> Callable[[str], None]:
    def plug(node_id: str) -> None:
        monkeypatch.setitem(DISPATCHERS, pb.DISPATCHER_FCFS, Reserving(node_id))
    return plug


REFUSED: dict[str, tuple[str, dict[str, object], Sequence[pb.UnavailabilityWindow], str]] = {
    # (the node the plugin places on, the job's rules, the windows, what the check says)
    "off every term of its OR": ("n2", {"alternatives": [["a"], ["b"]]}, (),
                                 "every feature of one of [['a'], ['b']]"),
    "outside its reservation's nodes": (
        "n2", {"reservation": "R"}, (window(["n0"], T - 10, T + 1_000, name="R"),),
        "outside its reservation 'R'"),
    "before its reservation begins": (
        "n0", {"reservation": "R"}, (window(["n0"], T + 10, T + 1_000, name="R"),),
        "outside its reservation 'R'"),
    "past its reservation's end": (
        "n0", {"reservation": "R"}, (window(["n0"], T - 10, T + 100, name="R"),),
        "outside its reservation 'R'"),
    "into another reservation": (
        "n0", {}, (window(["n0"], T - 10, T + 1_000, name="R"),), "unavailability window"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_plugins_start_that_breaks_a_term_or_a_reservation_is_refused(
        client: DispatcherClient, plug_in: Callable[[str], None], case: str) -> None:
    node_id, rules, windows, said = REFUSED[case]
    plug_in(node_id)
    request = cluster(windows=windows)
    request.windows.append(window(["n1"], T - 10, T + 1_000, name="R"))  # room inside R
    request.dispatcher = pb.DISPATCHER_FCFS
    job(request, "j", requested=600, **rules)  # type: ignore[arg-type]
    response = client.dispatch(request)
    assert response.report.status == pb.SOLVE_STATUS_FALLBACK
    assert "failed the check" in response.report.fallback_reason
    assert said in response.report.fallback_reason, response.report.fallback_reason
    assert node_id not in placed(response).get("j", set())
    assert check_decision(snapshot_from_pb(request), decision_from_pb(response)) == []


def test_a_plugins_start_inside_its_reservation_is_answered(
        client: DispatcherClient, plug_in: Callable[[str], None]) -> None:
    plug_in("n0")
    request = cluster(windows=[window(["n0"], T - 10, T + 1_000, name="R")])
    request.dispatcher = pb.DISPATCHER_FCFS
    job(request, "j", requested=600, reservation="R", alternatives=[["a"], ["c"]])
    response = client.dispatch(request)
    assert response.report.status == pb.SOLVE_STATUS_HEURISTIC
    assert placed(response) == {"j": {"n0"}}


# -- a node back at a known time -------------------------------------------------------------

@pytest.mark.parametrize("name", PLANNERS)
def test_a_node_back_at_a_time_is_planned_on_from_then(
        client: DispatcherClient, name: str) -> None:
    """n0 is drained until T + 400: sent up with a window [T, T + 400) admitting nobody (the
    contract, NodeState's comment). n1-n3 are busy until T + 1,000: the job is planned at
    T + 400 on n0, nothing starts on n0 now (a 100 s job behind it neither); sent DRAINED
    instead, the job waits for T + 1,000."""
    def plan(back_at: int | None) -> pb.DispatchResponse:
        request = cluster(windows=[window(["n0"], T, back_at)] if back_at else ())
        if back_at is None:
            request.nodes[0].state = pb.NODE_STATE_DRAINED
        running(request, "r", ("n1", "n2", "n3"), T + 1_000)
        job(request, "j", requested=600, submit=T - 300)
        job(request, "behind", requested=100, submit=T - 200)  # EASY reserves for a backfill
        return ask(client, name, request)

    back = plan(T + 400)
    assert not placed(back)
    assert expected(back)["j"] == T + 400
    drained = expected(plan(None))
    if name != "easy":  # EASY makes no reservation when nothing else could start now
        assert drained["j"] == T + 1_000


# -- sessions -------------------------------------------------------------------------------

@pytest.fixture
def sessions(server: RunningServer) -> Iterator[pb_grpc.SessionServiceStub]:
    with grpc.insecure_channel(server.target) as channel:
        yield pb_grpc.SessionServiceStub(channel)


def test_a_session_takes_terms_and_reservations_by_delta(
        sessions: pb_grpc.SessionServiceStub) -> None:
    """A session opened on the idle cluster: a delta's bad term is refused naming the delta's
    field; then an "a|b" job and an R job submitted by a delta setting the window R on n1
    start on their nodes, and a delta moving R to n2 moves the next R job there."""
    opened = sessions.OpenSession(pb.OpenSessionRequest(snapshot=cluster()), timeout=WAIT)
    sid = opened.session_id

    def update(sequence: int, **fields: object) -> pb.UpdateSessionResponse:
        delta = pb.UpdateSessionRequest(session_id=sid, sequence=sequence, time=T,
                                        dispatcher_name="easy", decide=True,
                                        predictor=pb.PREDICTOR_WALLTIME, **fields)
        response: pb.UpdateSessionResponse = sessions.UpdateSession(delta, timeout=WAIT)
        return response

    def queued(job_id: str, **rules: object) -> pb.QueuedJob:
        terms = rules.pop("alternatives", ())
        out = pb.QueuedJob(id=job_id, user="u", submit_time=T - 10, units=1,
                           unit_request={"core": 4}, requested_time=600, **rules)
        for term in terms:  # type: ignore[attr-defined]
            out.feature_alternatives.add(features=term)
        return out

    code, fields = violations(lambda: update(1, submitted=[queued("x", alternatives=[[]])]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert fields == ["submitted[0].feature_alternatives[0].features"]

    r_on = pb.UnavailabilityWindows(windows=[window(["n1"], T - 10, T + 1_000, name="R")])
    first = update(1, windows=r_on, submitted=[
        queued("in-r", reservation="R"), queued("ab", alternatives=[["a"], ["b"]])]).decision
    assert not first.report.fallback_reason
    starts = placed(first)
    assert starts["in-r"] == {"n1"}
    assert starts["ab"] <= {"n0", "n3"}

    r_moved = pb.UnavailabilityWindows(windows=[window(["n2"], T - 10, T + 1_000, name="R")])
    second = update(2, windows=r_moved, cancelled_job_ids=["in-r", "ab"],
                    submitted=[queued("in-r2", reservation="R")]).decision
    assert placed(second) == {"in-r2": {"n2"}}
    sessions.CloseSession(pb.CloseSessionRequest(session_id=sid), timeout=WAIT)


def test_every_built_in_dispatcher_is_tested_under_a_sites_rules() -> None:
    """A dispatcher added to the catalog is added here too (and so to the rules' tests above,
    which run every one of NOW_DISPATCHERS through the real service)."""
    assert set(DISPATCHER_NAMES) <= set(NOW_DISPATCHERS)
    assert set(DISPATCHER_NAMES) - {"easy-k", "conservative", "pcp19", "hcp19", "pcp20"} \
        <= set(EASY_FAMILY)
