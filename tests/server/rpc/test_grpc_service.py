"""The service over real gRPC on loopback: decisions, reports, bad input, health, reflection."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_status import rpc_status

from hpcdispatch.catalog import DISPATCHER_NAMES
from hpcdispatch.client import DispatcherClient
from hpcdispatch.decision_check import check_decision
from hpcdispatch.proto_convert import decision_from_pb, snapshot_from_pb, snapshot_to_pb
from hpcdispatch.server.config import load_config
from hpcdispatch.server.dispatchers import DISPATCHERS
from hpcdispatch.server.domain.profiles import PROFILES
from hpcdispatch.server.rpc.app import RunningServer, start_server
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import PRESETS, homogeneous
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc
from tests.instances import Crashing, Held, OverAllocating


def eurora_request(queued: int = 60, seed: int = 3) -> pb.DispatchRequest:
    return snapshot_to_pb(synthetic_snapshot(PRESETS["eurora"], queued, 0.7, seed=seed))


@pytest.mark.parametrize("dispatcher", sorted(DISPATCHER_NAMES.values()))  # the built-ins
def test_every_dispatcher_answers_with_a_checked_decision(
    client: DispatcherClient, dispatcher: int
) -> None:
    request = eurora_request()
    request.dispatcher = dispatcher
    response = client.dispatch(request)
    report = response.report
    assert report.dispatcher == dispatcher
    assert response.starts, "a 70 %-busy Eurora with 60 queued jobs has room for some"
    assert check_decision(snapshot_from_pb(request), decision_from_pb(response)) == []
    accounted = set(report.considered_job_ids) | {s.job_id for s in report.skipped_jobs}
    assert accounted == {j.id for j in request.queued_jobs}
    assert report.total_seconds >= report.build_seconds + report.solve_seconds * 0.99
    for start in response.starts:
        job = next(j for j in request.queued_jobs if j.id == start.job_id)
        assert len(start.units) == job.units
        assert all(dict(u.amounts) == dict(job.unit_request) for u in start.units)
        # the default predictor, data-driven, with no completion reported yet: requested time
        assert start.expected_duration == job.requested_time
    if dispatcher in (pb.DISPATCHER_PCP20, pb.DISPATCHER_HCP19, pb.DISPATCHER_PCP19):
        assert report.attempts and report.attempts[0].time_limit_ms == 100
        assert report.model_variables > 0 and report.model_constraints > 0
        assert report.HasField("objective")


def test_defaults_are_the_benchmarked_ones(client: DispatcherClient) -> None:
    """pcp20, book and data-driven: the defaults docs/benchmarks/models-vs-papers.md §2.6 and
    issues #13 and #49 argue for (the modes: docs/dispatchers.md)."""
    described = client.describe()
    assert described.default_dispatcher == pb.DISPATCHER_PCP20
    assert described.default_predictor == pb.PREDICTOR_DATA_DRIVEN
    assert described.default_profile == "book"


def test_search_parameters_reach_the_restart_policy(client: DispatcherClient) -> None:
    # 100 queued: a window of 40 leaves some out, and its 40 do not all start now (a window
    # that all starts now is optimal without a search, so it would have no attempts).
    request = eurora_request(queued=100)
    request.dispatcher = pb.DISPATCHER_PCP20
    request.search.profile = "papers"
    request.search.delta_ms = 30
    request.search.window = 40
    response = client.dispatch(request)
    assert response.report.profile == "papers"
    assert response.report.attempts[0].time_limit_ms == 30
    assert len(response.report.considered_job_ids) <= 40
    outside = [s for s in response.report.skipped_jobs
               if s.reason == pb.SKIP_REASON_OUTSIDE_WINDOW]
    assert outside


def test_the_request_deadline_caps_the_search(client: DispatcherClient) -> None:
    request = snapshot_to_pb(synthetic_snapshot(PRESETS["kit-forhlr2"], 100, 0.7, seed=5))
    request.dispatcher = pb.DISPATCHER_PCP20
    request.search.profile = "papers"  # k = 2, no stall rule: every attempt runs to its limit
    request.search.delta_ms = 4_000  # uncapped: at least δ + 2δ = 12 s of attempts
    request.search.delta_max_ms = 16_000
    deadline = 6.0
    try:
        response = client.dispatch(request, timeout=deadline)
    except grpc.RpcError as error:
        # Only on a machine too busy to answer at all within the deadline: the server still
        # lets go of the decision (checked by the abandoned-decision tests), nothing to read.
        assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED  # type: ignore[attr-defined]
        return
    attempts = response.report.attempts
    assert attempts
    assert sum(a.time_limit_ms for a in attempts) <= deadline * 1000


def _violations(call: Callable[[], object]) -> tuple[grpc.StatusCode, list[str]]:
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


def _mutate(fn: Callable[[pb.DispatchRequest], None]) -> pb.DispatchRequest:
    request = eurora_request(queued=5)
    fn(request)
    return request


BAD_INPUTS: dict[str, tuple[Callable[[pb.DispatchRequest], None], str]] = {
    "duplicate node id": (lambda r: setattr(r.nodes[1], "id", r.nodes[0].id), "nodes[1].id"),
    "duplicate job id": (
        lambda r: setattr(r.queued_jobs[1], "id", r.queued_jobs[0].id), "queued_jobs[1].id"
    ),
    "running on unknown node": (
        lambda r: setattr(r.running_jobs[0].units[0], "node_id", "nowhere"),
        "running_jobs[0].units[0].node_id",
    ),
    "zero capacity": (
        lambda r: r.nodes[2].capacity.__setitem__("core", 0), 'nodes[2].capacity["core"]'
    ),
    "negative request": (
        lambda r: r.queued_jobs[0].unit_request.__setitem__("core", -2),
        'queued_jobs[0].unit_request["core"]',
    ),
    "unknown resource type": (
        lambda r: r.queued_jobs[1].unit_request.__setitem__("fpga", 1),
        'queued_jobs[1].unit_request["fpga"]',
    ),
    "submit after t": (
        lambda r: setattr(r.queued_jobs[2], "submit_time", r.time + 5),
        "queued_jobs[2].submit_time",
    ),
    "start after t": (
        lambda r: setattr(r.running_jobs[0], "start_time", r.time + 1),
        "running_jobs[0].start_time",
    ),
    "zero units": (lambda r: setattr(r.queued_jobs[0], "units", 0), "queued_jobs[0].units"),
    "no requested time": (
        lambda r: setattr(r.queued_jobs[3], "requested_time", 0), "queued_jobs[3].requested_time"
    ),
    "node state unset": (
        lambda r: setattr(r.nodes[0], "state", pb.NODE_STATE_UNSPECIFIED), "nodes[0].state"
    ),
    "running over capacity": (
        lambda r: r.running_jobs[0].units[0].amounts.__setitem__("core", 10_000),
        "running_jobs[0].units[0]",
    ),
    "bad search parameter": (lambda r: setattr(r.search, "delta_ms", 0), "search.delta_ms"),
    "unknown profile": (lambda r: setattr(r.search, "profile", "turbo"), "search.profile"),
    "negative starvation bound": (
        lambda r: setattr(r.search, "starvation_wait_s", -1), "search.starvation_wait_s"
    ),
    "oracle without durations": (
        lambda r: (setattr(r, "predictor", pb.PREDICTOR_ORACLE),
                   r.queued_jobs[0].ClearField("actual_duration")),
        "queued_jobs[0].actual_duration",
    ),
    "no nodes": (lambda r: r.ClearField("nodes"), "nodes"),
    "duration beyond a year": (
        lambda r: setattr(r.queued_jobs[1], "requested_time", 2**62),
        "queued_jobs[1].requested_time",
    ),
    "capacity beyond 2^40": (
        lambda r: r.nodes[3].capacity.__setitem__("mem", 2**62), 'nodes[3].capacity["mem"]'
    ),
    "time beyond 2^40": (lambda r: setattr(r, "time", 2**50), "time"),
    "δmax below the profile's δ": (
        lambda r: setattr(r.search, "delta_max_ms", 50), "search.delta_max_ms"
    ),
    # The book with EASY-k's later reservations: no head reservation to make them around (all
    # three models raised and fell back on every call).
    "book with easy_head_depth 2": (
        lambda r: (setattr(r.search, "profile", "book"), setattr(r.search, "easy_head", True),
                   setattr(r.search, "easy_head_depth", 2)), "search.easy_head_depth"
    ),
    "easy_head over qos with promise_after_s and depth 3": (
        lambda r: (setattr(r.search, "profile", "qos"), setattr(r.search, "easy_head", True),
                   setattr(r.search, "promise_after_s", 0),
                   setattr(r.search, "easy_head_depth", 3)), "search.easy_head_depth"
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_is_invalid_argument_naming_the_field(
    client: DispatcherClient, case: str
) -> None:
    mutate, field = BAD_INPUTS[case]
    code, fields = _violations(lambda: client.dispatch(_mutate(mutate)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert field in fields, fields


def test_a_snapshot_beyond_the_size_limits_is_rejected(server: RunningServer) -> None:
    request = eurora_request(queued=5)
    limit = server.config.max_nodes
    for i in range(limit + 1 - len(request.nodes)):
        request.nodes.add(id=f"x{i}", state=pb.NODE_STATE_UP, capacity={"core": 1})
    with DispatcherClient(server.target) as c:
        code, fields = _violations(lambda: c.dispatch(request, timeout=120))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "nodes" in fields


def test_bad_completions_are_rejected(client: DispatcherClient) -> None:
    bad = pb.JobCompletion(job_id="a", user="u", units=1, unit_request={"core": 1},
                           requested_time=10, start_time=50, end_time=40)
    code, fields = _violations(lambda: client.report_completions([bad]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert fields == ["completions[0].end_time"]
    good = pb.JobCompletion(job_id="a", user="u", units=1, unit_request={"core": 1},
                            requested_time=10, start_time=40, end_time=50)
    assert client.report_completions([good]) == 1


def test_a_large_snapshot_goes_through(client: DispatcherClient) -> None:
    """10,000 nodes and 5,000 queued jobs: well beyond gRPC's default 4 MiB message limit."""
    snap = synthetic_snapshot(homogeneous("big", 10_000, {"core": 32, "mem": 131072}), 5_000,
                              0.7, seed=2)
    request = snapshot_to_pb(snap)
    request.dispatcher = pb.DISPATCHER_PCP20
    assert request.ByteSize() > 4 * 1024 * 1024 // 4
    response = client.dispatch(request, timeout=120)
    assert response.starts
    assert check_decision(snap, decision_from_pb(response)) == []


def test_a_failing_decision_is_replaced_by_the_checked_fallback(
    client: DispatcherClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(DISPATCHERS, pb.DISPATCHER_FCFS, OverAllocating())
    request = eurora_request()
    request.dispatcher = pb.DISPATCHER_FCFS
    response = client.dispatch(request)
    assert response.report.status == pb.SOLVE_STATUS_FALLBACK
    assert "failed the check" in response.report.fallback_reason
    assert check_decision(snapshot_from_pb(request), decision_from_pb(response)) == []
    assert response.starts  # EASY answered


def test_a_crashing_dispatcher_is_replaced_by_the_fallback(
    client: DispatcherClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(DISPATCHERS, pb.DISPATCHER_HCP19, Crashing())
    request = eurora_request()
    request.dispatcher = pb.DISPATCHER_HCP19
    response = client.dispatch(request)
    assert response.report.status == pb.SOLVE_STATUS_FALLBACK
    assert "boom" in response.report.fallback_reason


def test_health_and_reflection(server: RunningServer) -> None:
    with grpc.insecure_channel(server.target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "hpcdispatch.v1.DispatcherService"):
            reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=60)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        replies = stub.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=60
        )
        names = {s.name for r in replies for s in r.list_services_response.service}
    assert "hpcdispatch.v1.DispatcherService" in names


def test_describe_service(client: DispatcherClient) -> None:
    info = client.describe()
    assert [p.name for p in info.profiles] == ["book", "qos", "papers"]  # issue #49's modes
    papers = next(p for p in info.profiles if p.name == "papers")
    assert (papers.delta_ms, papers.delta_max_ms, papers.k, papers.window) == (1000, 16000, 2, 100)
    qos = next(p for p in info.profiles if p.name == "qos")
    assert (qos.starvation_wait_s, qos.work_conserving, papers.starvation_wait_s) == (
        PROFILES["qos"][0].starvation_wait_s, True, 0)
    assert info.default_profile == "book"
    assert set(info.dispatchers) == set(DISPATCHER_NAMES.values())  # plugins go by name
    assert info.default_dispatcher == pb.DISPATCHER_PCP20


def _head_and_backfill_request() -> pb.DispatchRequest:
    """12 cores, 4 busy for 100 s; the oldest job needs all 12 (the head, reserved at t + 100),
    a 500-s job would delay it, a 50-s job would not."""
    # Requested times as d_i, in a knowledge base of its own (other tests teach theirs).
    request = pb.DispatchRequest(time=1000, dispatcher=pb.DISPATCHER_PCP20,
                                 predictor=pb.PREDICTOR_WALLTIME, cluster="promises-test")
    request.nodes.add(id="n1", state=pb.NODE_STATE_UP, capacity={"core": 12})
    request.running_jobs.add(
        id="r", user="u", start_time=990, requested_time=110,
        units=[pb.UnitAllocation(node_id="n1", amounts={"core": 4})],
    )
    for job_id, cores, length, submit in (("wide", 12, 1000, 950), ("long", 4, 500, 960),
                                          ("short", 4, 50, 990)):
        request.queued_jobs.add(id=job_id, user="u", submit_time=submit, units=1,
                                unit_request={"core": cores}, requested_time=length)
    return request


def test_the_book_and_easy_head_reach_the_decision(client: DispatcherClient) -> None:
    request = _head_and_backfill_request()
    request.search.deterministic = True  # the same decision however loaded the machine is
    request.search.profile = "qos"  # no reservation yet: the model starts both that fit
    assert {s.job_id for s in client.dispatch(request).starts} == {"long", "short"}
    request.search.profile = "book"  # "wide" holds a promise at t + 100: "long" would break it
    assert [s.job_id for s in client.dispatch(request).starts] == ["short"]
    request.search.profile = "qos"
    request.search.easy_head = True  # the field alone, over a profile without it
    assert [s.job_id for s in client.dispatch(request).starts] == ["short"]


@pytest.mark.parametrize("retired", ["promises", "packing", "fast"])
def test_a_retired_profile_is_refused_naming_the_mode_that_replaces_it(
    client: DispatcherClient, retired: str,
) -> None:
    # Issue #49: not a crash, not another profile served silently.
    request = _head_and_backfill_request()
    request.search.profile = retired
    with pytest.raises(grpc.RpcError) as refused:
        client.dispatch(request)
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = refused.value.details() or ""
    assert "search.profile" in details and f"profile '{retired}' was retired" in details
    assert "use `book`" in details


def test_easy_head_depth_keeps_the_next_blocked_jobs_reservation(
    client: DispatcherClient,
) -> None:
    # tests/server/dispatchers/cp/test_later_reservations.py's hand case over the wire: "wide"
    # is the head (n0 at
    # t + 100), "next" the next blocked job (n1 at t + 50); "young" fits on n1 now without
    # touching the head, but would push "next" back.
    assert all(p.easy_head_depth == 1 for p in client.describe().profiles)
    request = pb.DispatchRequest(time=1000, dispatcher=pb.DISPATCHER_PCP20,
                                 predictor=pb.PREDICTOR_WALLTIME, cluster="depth-test")
    request.nodes.add(id="n0", state=pb.NODE_STATE_UP, capacity={"core": 12})
    request.nodes.add(id="n1", state=pb.NODE_STATE_UP, capacity={"core": 8})
    for job_id, node_id, cores, ends in (("r0", "n0", 8, 100), ("r1", "n1", 4, 50)):
        request.running_jobs.add(
            id=job_id, user="u", start_time=990, requested_time=10 + ends,
            units=[pb.UnitAllocation(node_id=node_id, amounts={"core": cores})],
        )
    for job_id, cores, length, submit in (("wide", 12, 100, 950), ("next", 8, 200, 955),
                                          ("young", 4, 300, 990)):
        request.queued_jobs.add(id=job_id, user="u", submit_time=submit, units=1,
                                unit_request={"core": cores}, requested_time=length)
    request.search.deterministic = True
    request.search.profile = "qos"  # EASY's head discipline by hand, no starvation guard
    request.search.easy_head, request.search.starvation_wait_s = True, 0
    assert [s.job_id for s in client.dispatch(request).starts] == ["young"]
    request.search.easy_head_depth = 2
    assert not client.dispatch(request).starts


def test_capacity_first_starts_the_most_processors_now(client: DispatcherClient) -> None:
    # tests/server/dispatchers/cp/test_capacity_first.py's hand case over the wire: six one-core
    # nodes, n4 and n5
    # busy until t + 100; "wide" (6 nodes) is the head at t + 100. "short" now and "four"
    # after it is the least slowdown; "four" now uses four processors instead of one.
    profiles = {p.name: p for p in client.describe().profiles}
    assert profiles["book"].capacity_first and not profiles["qos"].capacity_first
    request = pb.DispatchRequest(time=1000, dispatcher=pb.DISPATCHER_PCP20,
                                 predictor=pb.PREDICTOR_WALLTIME, cluster="capacity-test")
    for i in range(6):
        request.nodes.add(id=f"n{i}", state=pb.NODE_STATE_UP, capacity={"core": 1})
    for node_id in ("n4", "n5"):
        request.running_jobs.add(
            id=f"r-{node_id}", user="u", start_time=990, requested_time=110,
            units=[pb.UnitAllocation(node_id=node_id, amounts={"core": 1})],
        )
    for job_id, units, length, submit in (("wide", 6, 100, 950), ("four", 4, 90, 970),
                                          ("short", 1, 10, 980)):
        request.queued_jobs.add(id=job_id, user="u", submit_time=submit, units=units,
                                unit_request={"core": 1}, requested_time=length)
    request.search.deterministic = True
    request.search.profile = "qos"  # EASY's head discipline by hand (the retired `promises`)
    request.search.easy_head, request.search.starvation_wait_s = True, 0
    assert [s.job_id for s in client.dispatch(request).starts] == ["short"]
    request.search.capacity_first = True  # the field alone, over a profile without it
    assert [s.job_id for s in client.dispatch(request).starts] == ["four"]
    request.search.Clear()
    request.search.deterministic = True
    request.search.profile = "book"  # capacity first around the head's promise
    assert [s.job_id for s in client.dispatch(request).starts] == ["four"]


def test_an_exceeded_prediction_is_corrected_to_the_requested_time(
    client: DispatcherClient,
) -> None:
    """Running past its predicted end, a job is expected to run to its requested time."""
    request = pb.DispatchRequest(time=1000, dispatcher=pb.DISPATCHER_EASY)
    for name in ("n1", "n2"):
        request.nodes.add(id=name, state=pb.NODE_STATE_UP, capacity={"core": 4})
    request.running_jobs.add(
        id="r", user="u", start_time=900, requested_time=1000, expected_duration=50,
        units=[pb.UnitAllocation(node_id="n1", amounts={"core": 4})],
    )
    request.queued_jobs.add(id="head", user="u", submit_time=800, units=2,
                            unit_request={"core": 4}, requested_time=100)
    request.queued_jobs.add(id="b", user="u", submit_time=900, units=1,
                            unit_request={"core": 4}, requested_time=500)
    # Uncorrected, r would end at t + 1 and "b" (500 s) would delay the head's reservation;
    # corrected, r ends at t + 900 and "b" ends before the reservation.
    response = client.dispatch(request)
    assert [s.job_id for s in response.starts] == ["b"]


def test_node_changes_between_snapshots_are_seen(client: DispatcherClient) -> None:
    # The service reuses its table of a node list it has seen (server/intake/node_table.py): the
    # same nodes with one state or one capacity changed must be a
    # different table, never the old one.
    request = pb.DispatchRequest(time=1_000, dispatcher=pb.DISPATCHER_EASY)
    for i in range(3):
        request.nodes.add(id=f"n{i}", state=pb.NODE_STATE_UP, capacity={"core": 4})
    request.queued_jobs.add(id="a", submit_time=900, units=1, unit_request={"core": 4},
                            requested_time=60)
    first = client.dispatch(request)
    assert {u.node_id for s in first.starts for u in s.units} == {"n0"}  # best fit, node order
    request.nodes[0].state = pb.NODE_STATE_DOWN
    assert {u.node_id for s in client.dispatch(request).starts for u in s.units} == {"n1"}
    request.nodes[0].state = pb.NODE_STATE_UP
    request.nodes[0].capacity["core"] = 2  # n0 can no longer hold the job
    assert {u.node_id for s in client.dispatch(request).starts for u in s.units} == {"n1"}
    request.nodes[1].capacity["core"] = 0  # a bad list after good ones is still rejected
    code, fields = _violations(lambda: client.dispatch(request))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert 'nodes[1].capacity["core"]' in fields


def test_a_running_job_edited_between_snapshots_is_checked_again(
    client: DispatcherClient,
) -> None:
    # The service reuses a running job it checked in the cluster's last snapshot only while the
    # job's bytes are identical (server/intake/running_job_cache.py); the snapshot-wide checks (node
    # capacity, ids, start times) run on every request.
    request = eurora_request(queued=5, seed=8)
    request.cluster = "edited-between-snapshots"
    request.dispatcher = pb.DISPATCHER_EASY  # deterministic, whatever the machine's load
    first = client.dispatch(request)
    assert check_decision(snapshot_from_pb(request), decision_from_pb(first)) == []
    edited = pb.DispatchRequest()
    edited.CopyFrom(request)
    edited.running_jobs[3].units[0].amounts["core"] = 10_000  # over its node's capacity
    code, fields = _violations(lambda: client.dispatch(edited))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert fields == ["running_jobs[3].units[0]"]
    later = pb.DispatchRequest()
    later.CopyFrom(request)
    later.time = request.running_jobs[5].start_time - 1  # unchanged jobs, earlier snapshot time
    code, fields = _violations(lambda: client.dispatch(later))
    assert "running_jobs[5].start_time" in fields
    again = client.dispatch(request)  # the unedited snapshot: the same decision
    assert [s.job_id for s in again.starts] == [s.job_id for s in first.starts]


def test_health_is_answered_while_decisions_hold_every_decision_slot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 2 worker threads: one decision at a time, the other thread stays for health checks. The
    # decision is held until the test has seen what it checks, however busy the machine.
    held = Held(pb.DISPATCHER_PCP20, pb.DISPATCHER_EASY)
    monkeypatch.setitem(DISPATCHERS, pb.DISPATCHER_PCP20, held)
    config = dataclasses.replace(load_config(env={}), listen="127.0.0.1:0", workers=2)
    running = start_server(config)
    try:
        slow = eurora_request(queued=80, seed=4)
        slow.dispatcher = pb.DISPATCHER_PCP20
        result: dict[str, object] = {}

        def call() -> None:
            with DispatcherClient(running.target, timeout=300) as slow_client:
                result["response"] = slow_client.dispatch(slow)

        worker = threading.Thread(target=call)
        worker.start()
        assert held.entered.wait(120), "the slow decision did not start"
        assert running.metrics is not None
        in_progress = running.metrics.registry.get_sample_value(
            "hpcdispatch_decisions_in_progress")
        assert in_progress == 1
        with grpc.insecure_channel(running.target) as channel:
            stub = pb_grpc.DispatcherServiceStub(channel)  # no retries: see the refusal itself
            with pytest.raises(grpc.RpcError) as refused:
                stub.Dispatch(eurora_request(queued=5), timeout=60)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "decisions in progress" in (refused.value.details() or "")
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=60
            )
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
            assert worker.is_alive() and not held.release.is_set()  # answered while it waited
        held.release.set()
        worker.join(timeout=300)
        assert isinstance(result.get("response"), pb.DispatchResponse)
        with DispatcherClient(running.target, timeout=60) as client:
            assert client.dispatch(eurora_request(queued=5)).report.total_seconds > 0
    finally:
        held.release.set()
        running.stop(grace=1.0)


@pytest.mark.parametrize(("method", "message_type"), [
    ("/hpcdispatch.v1.DispatcherService/Dispatch", "hpcdispatch.v1.DispatchRequest"),
    ("/hpcdispatch.v1.DispatcherService/ReportCompletions",
     "hpcdispatch.v1.ReportCompletionsRequest"),
    ("/grpc.health.v1.Health/Check", "grpc.health.v1.HealthCheckRequest"),
])
def test_undecodable_request_bytes_are_invalid_argument(
    server: RunningServer, method: str, message_type: str
) -> None:
    """Bytes that are not a protobuf message of the method's type: the caller's error."""
    with grpc.insecure_channel(server.target) as channel:
        raw = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
        for garbage in (b"\xff\xff\xff\xff", b"\x0a\x05ab"):  # bad tag; truncated string
            with pytest.raises(grpc.RpcError) as caught:
                raw(garbage, timeout=60)
            error = caught.value
            assert error.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
            details = error.details()  # type: ignore[attr-defined]
            assert f"could not be decoded as a {message_type} message" in details
        # The same server still decodes well-formed bytes.
        if method.endswith("/Check"):
            reply = raw(health_pb2.HealthCheckRequest().SerializeToString(), timeout=60)
            assert health_pb2.HealthCheckResponse.FromString(reply).status == (
                health_pb2.HealthCheckResponse.SERVING)


def test_undecodable_request_in_a_request_stream_is_invalid_argument(
    server: RunningServer,
) -> None:
    """Reflection is a bidirectional stream: one bad message among good ones is refused."""
    with grpc.insecure_channel(server.target) as channel:
        raw = channel.stream_stream("/grpc.reflection.v1alpha.ServerReflection/"
                                    "ServerReflectionInfo",
                                    request_serializer=None, response_deserializer=None)
        good = reflection_pb2.ServerReflectionRequest(list_services="").SerializeToString()
        with pytest.raises(grpc.RpcError) as caught:
            list(raw(iter([good, b"\xff\xff\xff\xff"]), timeout=60))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT  # type: ignore[attr-defined]
    assert "ServerReflectionRequest" in caught.value.details()  # type: ignore[attr-defined]
