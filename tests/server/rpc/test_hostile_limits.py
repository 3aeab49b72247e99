"""Issue #22, cases 1-3 through a real server on loopback: valid but costly requests are refused
before any costly stage with INVALID_ARGUMENT naming the field and the limit, other callers keep
getting decisions, and errors echoing long values still reach a client with gRPC's default
metadata limit as INVALID_ARGUMENT / FAILED_PRECONDITION (not RESOURCE_EXHAUSTED)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from hpcdispatch.server.rpc.app import RunningServer
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc
from tests.observability import metrics_server, small_request

HUGE = 20_000_000  # characters of a hostile string (20 MB)
BIG_MESSAGES = [("grpc.max_send_message_length", 2**30)]  # the client may send large requests


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with metrics_server(workers=4, decision_concurrency=1) as running:
        yield running


@pytest.fixture(scope="module")
def channel(server: RunningServer) -> Iterator[grpc.Channel]:
    # Default metadata limits: what a caller sees is what any gRPC client sees.
    with grpc.insecure_channel(server.target, options=BIG_MESSAGES) as ch:
        yield ch


def refusal(call: grpc.RpcError) -> tuple[grpc.StatusCode, list[tuple[str, str]]]:
    status = rpc_status.from_call(call)  # type: ignore[arg-type]
    violations = []
    for detail in status.details if status is not None else ():
        bad = error_details_pb2.BadRequest()
        if detail.Unpack(bad):
            violations += [(v.field, v.description) for v in bad.field_violations]
    return call.code(), violations


def dispatch_error(channel: grpc.Channel, request: pb.DispatchRequest,
                   timeout: float = 30.0) -> tuple[grpc.StatusCode, list[tuple[str, str]]]:
    with pytest.raises(grpc.RpcError) as caught:
        pb_grpc.DispatcherServiceStub(channel).Dispatch(request, timeout=timeout)
    return refusal(caught.value)  # type: ignore[arg-type]


def test_a_huge_job_name_is_invalid_argument_naming_the_field_and_the_limit(
    channel: grpc.Channel,
) -> None:
    request = small_request()
    request.queued_jobs[2].name = "n" * HUGE
    code, violations = dispatch_error(channel, request)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert violations[0][0] == "queued_jobs[2].name"
    assert "1024" in violations[0][1] and "max_name_chars" in violations[0][1]


@pytest.mark.parametrize("field", ["cluster", "node id", "user"])
def test_huge_identifiers_are_refused_naming_the_field(channel: grpc.Channel, field: str) -> None:
    request = small_request()
    if field == "cluster":
        request.cluster, expected = "c" * HUGE, "cluster"
    elif field == "node id":
        request.nodes[5].id, expected = "x" * HUGE, "nodes[5].id"
    else:
        request.running_jobs[0].user, expected = "u" * HUGE, "running_jobs[0].user"
    code, violations = dispatch_error(channel, request)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert (expected, f"{HUGE} characters exceed the limit of 256 (max_id_chars)") in violations


def test_a_completion_with_a_huge_name_is_refused_and_nothing_stored(
    channel: grpc.Channel, server: RunningServer,
) -> None:
    report = pb.ReportCompletionsRequest(cluster="hostile")
    report.completions.add(job_id="j1", user="u", name="n" * HUGE, units=1,
                           unit_request={"core": 1}, requested_time=100, start_time=0,
                           end_time=50)
    with pytest.raises(grpc.RpcError) as caught:
        pb_grpc.DispatcherServiceStub(channel).ReportCompletions(report, timeout=30)
    code, violations = refusal(caught.value)  # type: ignore[arg-type]
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert violations[0][0] == "completions[0].name" and "max_name_chars" in violations[0][1]
    assert server.predictors.knowledge_base.count("hostile") == 0


def _own_type_per_node(nodes: int) -> pb.DispatchRequest:
    """Issue #22 case 1: every node names its own resource type (0.4 MB at 12,000 nodes)."""
    request = pb.DispatchRequest(time=1000, dispatcher=pb.DISPATCHER_PCP20)
    for i in range(nodes):
        request.nodes.add(id=f"n{i}", state=pb.NODE_STATE_UP, capacity={"core": 16, f"t{i}": 1})
    for j in range(200):
        request.queued_jobs.add(id=f"q{j}", user="u", submit_time=900, units=1,
                                unit_request={"core": 1}, requested_time=3600)
    return request


def test_a_type_per_node_is_refused_at_once_and_other_callers_are_served(
    channel: grpc.Channel,
) -> None:
    """Before: two such requests held both decision slots for about 85 s (every other Dispatch
    got RESOURCE_EXHAUSTED) and memory reached 4.4 GB."""
    hostile = _own_type_per_node(12_000)
    answers: dict[int, tuple[grpc.StatusCode, list[tuple[str, str]]]] = {}

    def send(i: int) -> None:
        answers[i] = dispatch_error(channel, hostile, timeout=120)

    senders = [threading.Thread(target=send, args=(i,)) for i in range(2)]
    for sender in senders:
        sender.start()
    time.sleep(0.5)  # both in the server (or answered)
    other = pb_grpc.DispatcherServiceStub(channel).Dispatch(small_request(), timeout=120)
    assert other.report.status != pb.SOLVE_STATUS_UNSPECIFIED
    for sender in senders:
        sender.join(300)
    for code, violations in answers.values():
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert violations[0][0] == "nodes" and "max_resource_types" in violations[0][1]


def test_a_site_rule_beyond_max_labels_is_refused_naming_the_field_and_the_limit(
    channel: grpc.Channel,
) -> None:
    """Issue #50: a node's features, a job's partitions and a window's users, each beyond
    max_labels (64), or a name beyond max_id_chars."""
    request = small_request()
    request.nodes[0].features.extend(f"f{k}" for k in range(100_000))
    request.queued_jobs[1].partitions.append("p" * HUGE)
    request.windows.add(node_ids=[request.nodes[0].id], start_time=0, end_time=10,
                        users=[f"u{k}" for k in range(65)])
    code, violations = dispatch_error(channel, request)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert ("nodes[0].features", "100000 names exceed the limit of 64 (max_labels)") in violations
    # the node list is refused first: its limits before the jobs' and the windows'
    request.nodes[0].ClearField("features")
    code, violations = dispatch_error(channel, request)
    said = dict(violations)
    assert "(max_id_chars)" in said["queued_jobs[1].partitions[0]"]
    assert said["windows[0].users"] == "65 names exceed the limit of 64 (max_labels)"


def test_a_running_job_beyond_max_units_is_refused_before_conversion(
    channel: grpc.Channel,
) -> None:
    request = small_request()
    job = request.running_jobs[0]
    job.units.extend([job.units[0]] * 150_000)  # 150,001 units on one node: max_units 100,000
    code, violations = dispatch_error(channel, request)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert violations == [("running_jobs[0].units",
                           "150001 units exceed the limit of 100000 (max_units)")]


@pytest.mark.parametrize("length", [3_000, 6_000, 20_000])
def test_an_unknown_long_resource_type_stays_invalid_argument_at_the_client(
    channel: grpc.Channel, length: int,
) -> None:
    """Before: from about 3 KB the echoed type outgrew the client's 8 KB metadata limit and
    the caller saw RESOURCE_EXHAUSTED, which hpcdispatch.client retries."""
    request = small_request()
    request.queued_jobs[0].unit_request["y" * length] = 1
    code, violations = dispatch_error(channel, request)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    field, description = violations[0]
    assert field == "queued_jobs[0].unit_request"
    assert f"(truncated, {length} characters)" in description and len(description) < 500


def test_many_long_violations_fit_the_metadata_limit_and_say_what_was_left_off(
    channel: grpc.Channel,
) -> None:
    request = small_request(queued=120)
    for job in request.queued_jobs:
        job.unit_request["z" * 200 + job.id] = 1  # within max_id_chars, unknown to the nodes
    with pytest.raises(grpc.RpcError) as caught:
        pb_grpc.DispatcherServiceStub(channel).Dispatch(request, timeout=30)
    code, violations = refusal(caught.value)  # type: ignore[arg-type]
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert 0 < len(violations) < 100
    assert f"({100 - len(violations)} more not listed)" in caught.value.details()  # type: ignore[attr-defined]


def test_an_unknown_long_session_id_is_an_error_the_client_can_read(
    channel: grpc.Channel,
) -> None:
    sessions = pb_grpc.SessionServiceStub(channel)
    for session_id, expected in (("s" * 200, grpc.StatusCode.FAILED_PRECONDITION),
                                 ("s" * 6_000, grpc.StatusCode.INVALID_ARGUMENT)):
        with pytest.raises(grpc.RpcError) as caught:
            sessions.UpdateSession(pb.UpdateSessionRequest(session_id=session_id, sequence=1),
                                   timeout=60)
        assert caught.value.code() == expected  # type: ignore[attr-defined]
        assert session_id not in caught.value.details()  # type: ignore[attr-defined]


def test_a_delta_with_a_huge_job_id_is_refused_and_the_session_kept(
    channel: grpc.Channel,
) -> None:
    sessions = pb_grpc.SessionServiceStub(channel)
    opened = sessions.OpenSession(pb.OpenSessionRequest(snapshot=small_request()), timeout=30)
    delta = pb.UpdateSessionRequest(session_id=opened.session_id, sequence=1, time=opened.
                                    sequence + small_request().time)
    delta.submitted.add(id="q" * HUGE, user="u", submit_time=delta.time, units=1,
                        unit_request={"core": 1}, requested_time=60)
    with pytest.raises(grpc.RpcError) as caught:
        sessions.UpdateSession(delta, timeout=30)
    code, violations = refusal(caught.value)  # type: ignore[arg-type]
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert violations[0] == ("submitted[0].id",
                             f"{HUGE} characters exceed the limit of 256 (max_id_chars)")
    ok = pb.UpdateSessionRequest(session_id=opened.session_id, sequence=1, time=delta.time)
    assert sessions.UpdateSession(ok, timeout=30).sequence == 1
