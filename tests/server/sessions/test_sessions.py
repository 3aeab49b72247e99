"""SessionService through real gRPC on loopback: deltas, validation, resync reasons, bounds."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from hpcdispatch.client import DispatcherClient
from hpcdispatch.client.session import delta_between, session_failure
from hpcdispatch.proto_convert import snapshot_to_pb
from hpcdispatch.server.config import load_config
from hpcdispatch.server.rpc.app import RunningServer, start_server
from hpcdispatch.server.sessions.state import SessionState
from hpcdispatch.server.sessions.store import GoneReason, SessionGone, SessionStore
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import homogeneous
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc

SYSTEM = homogeneous("h16", 16, {"core": 32, "mem": 131072})


def start(**overrides: object) -> RunningServer:
    config = dataclasses.replace(load_config(env={}), listen="127.0.0.1:0", workers=4,
                                 **overrides)
    return start_server(config)


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    running = start()
    yield running
    running.stop(grace=1.0)


@pytest.fixture
def stub(server: RunningServer) -> Iterator[pb_grpc.SessionServiceStub]:
    with grpc.insecure_channel(server.target) as channel:
        yield pb_grpc.SessionServiceStub(channel)


@pytest.fixture
def client(server: RunningServer) -> Iterator[DispatcherClient]:
    with DispatcherClient(server.target, timeout=30) as c:
        yield c


def snapshot(seed: int = 1, queued: int = 20) -> pb.DispatchRequest:
    request = snapshot_to_pb(synthetic_snapshot(SYSTEM, queued, 0.6, seed=seed))
    request.dispatcher = pb.DISPATCHER_EASY
    request.predictor = pb.PREDICTOR_WALLTIME
    return request


def starts(response: pb.DispatchResponse) -> list[tuple[str, tuple[str, ...], int]]:
    return [(s.job_id, tuple(u.node_id for u in s.units), s.expected_duration)
            for s in response.starts]


def open_session(stub: pb_grpc.SessionServiceStub, request: pb.DispatchRequest) -> str:
    opened = stub.OpenSession(pb.OpenSessionRequest(snapshot=request), timeout=30)
    assert opened.sequence == 0
    return str(opened.session_id)


def update(
    stub: pb_grpc.SessionServiceStub, session_id: str, sequence: int, time: int, **fields: object
) -> pb.UpdateSessionResponse:
    request = pb.UpdateSessionRequest(session_id=session_id, sequence=sequence, time=time,
                                      dispatcher=pb.DISPATCHER_EASY,
                                      predictor=pb.PREDICTOR_WALLTIME, **fields)
    return stub.UpdateSession(request, timeout=30)


def error_fields(error: grpc.RpcError) -> list[str]:
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    assert status is not None
    out = []
    for detail in status.details:
        bad = error_details_pb2.BadRequest()
        if detail.Unpack(bad):
            out.extend(v.field for v in bad.field_violations)
    return out


# -- decisions on deltas equal decisions on full snapshots -----------------------------------


def test_a_decision_on_deltas_equals_dispatch_on_the_same_full_state(
    stub: pb_grpc.SessionServiceStub, client: DispatcherClient,
) -> None:
    first = snapshot()
    session_id = open_session(stub, first)
    # The workload manager starts two of the decided jobs, one job ends, one is cancelled, a
    # new one arrives and a node goes down.
    decided = client.dispatch(first).starts
    assert len(decided) >= 2
    second = pb.DispatchRequest()
    second.CopyFrom(first)
    second.time += 60
    queued = {j.id: j for j in first.queued_jobs}
    started = []
    for s in decided[:2]:
        job = queued[s.job_id]
        started.append(pb.RunningJob(
            id=job.id, user=job.user, name=job.name, start_time=second.time,
            requested_time=job.requested_time, expected_duration=s.expected_duration,
            units=[pb.UnitAllocation(node_id=u.node_id, amounts=u.amounts) for u in s.units]))
    ended = second.running_jobs[0].id
    cancelled = next(j.id for j in first.queued_jobs if j.id not in {s.job_id for s in decided})
    new_job = pb.QueuedJob(id="new", user="u1", submit_time=second.time, units=1,
                           unit_request={"core": 8}, requested_time=600)
    down = second.nodes[3].id
    del second.running_jobs[0]
    second.running_jobs.extend(started)
    kept = [j for j in second.queued_jobs
            if j.id not in {s.job_id for s in decided[:2]} | {cancelled}]
    del second.queued_jobs[:]
    second.queued_jobs.extend([*kept, new_job])
    second.nodes[3].state = pb.NODE_STATE_DOWN

    answer = update(
        stub, session_id, 1, second.time, ended_job_ids=[ended], cancelled_job_ids=[cancelled],
        submitted=[new_job], started=started, decide=True,
        node_changes=[pb.NodeChange(id=down, state=pb.NODE_STATE_DOWN)],
    )
    assert answer.sequence == 1
    assert starts(answer.decision) == starts(client.dispatch(second))
    assert answer.decision.time == second.time


def test_a_decision_is_not_applied_until_the_caller_confirms_it(
    stub: pb_grpc.SessionServiceStub, client: DispatcherClient,
) -> None:
    first = snapshot(seed=2)
    session_id = open_session(stub, first)
    one = update(stub, session_id, 1, first.time, decide=True)
    two = update(stub, session_id, 2, first.time, decide=True)
    # Nothing was confirmed: the second decision is Dispatch's on the first snapshot, with
    # the promises the first decision reported sent back (the session keeps them, as the
    # protocol says), never a decision on a state where the first decision's starts ran.
    promised = {e.job_id: e for e in one.decision.report.expected_starts if e.promised}
    assert one.decision.starts and promised
    sent_back = pb.DispatchRequest()
    sent_back.CopyFrom(first)
    for job in sent_back.queued_jobs:
        if job.id in promised:
            job.promised_start = promised[job.id].start_time
            job.promise_token = promised[job.id].promise_token
    assert starts(two.decision) == starts(client.dispatch(sent_back))


# -- invalid deltas -------------------------------------------------------------------------


def running_on(request: pb.DispatchRequest, node: int, job_id: str, cores: int) -> pb.RunningJob:
    return pb.RunningJob(id=job_id, user="u", start_time=request.time, requested_time=60,
                         units=[pb.UnitAllocation(node_id=request.nodes[node].id,
                                                  amounts={"core": cores})])


BAD_DELTAS: list[tuple[str, dict[str, object]]] = [
    ("submitted[0].units", {"submitted": [pb.QueuedJob(
        id="x", user="u", units=0, unit_request={"core": 1}, requested_time=60)]}),
    ("submitted[0].submit_time", {"submitted": [pb.QueuedJob(
        id="x", user="u", units=1, submit_time=10**9, unit_request={"core": 1},
        requested_time=60)]}),
    ('submitted[0].unit_request["gpu"]', {"submitted": [pb.QueuedJob(
        id="x", user="u", units=1, unit_request={"gpu": 1}, requested_time=60)]}),
    ("submitted[1].id", {"submitted": [
        pb.QueuedJob(id="x", user="u", units=1, unit_request={"core": 1}, requested_time=60),
        pb.QueuedJob(id="x", user="u", units=1, unit_request={"core": 1}, requested_time=60)]}),
    ("started[0].units[0].node_id", {"started": [pb.RunningJob(
        id="y", user="u", requested_time=60,
        units=[pb.UnitAllocation(node_id="nowhere", amounts={"core": 1})])]}),
    ('node_changes[0].capacity["core"]', {"node_changes": [pb.NodeChange(
        id="n01", state=pb.NODE_STATE_UP, capacity={"core": -1})]}),
    ("node_changes[0].capacity", {"node_changes": [pb.NodeChange(
        id="brand-new", state=pb.NODE_STATE_UP)]}),
    ("node_changes[0].state", {"node_changes": [pb.NodeChange(id="n01")]}),
    ("dispatcher", {"dispatcher": 999}),
]


@pytest.mark.parametrize(("field", "fields"), BAD_DELTAS, ids=[f for f, _ in BAD_DELTAS])
def test_each_invalid_delta_is_rejected_naming_its_field_and_changes_nothing(
    stub: pb_grpc.SessionServiceStub, client: DispatcherClient, field: str,
    fields: dict[str, object],
) -> None:
    first = snapshot(seed=3)
    session_id = open_session(stub, first)
    request = pb.UpdateSessionRequest(session_id=session_id, sequence=1, time=first.time + 5)
    for name, value in fields.items():
        if isinstance(value, list):
            getattr(request, name).extend(value)
        else:
            setattr(request, name, value)
    with pytest.raises(grpc.RpcError) as caught:
        stub.UpdateSession(request, timeout=30)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in error_fields(caught.value)
    # Unchanged: sequence 1 is still the next one, and the state is the first snapshot's.
    answer = update(stub, session_id, 1, first.time, decide=True)
    assert starts(answer.decision) == starts(client.dispatch(first))


def test_a_start_beyond_a_nodes_capacity_is_rejected_with_its_unit(
    stub: pb_grpc.SessionServiceStub, client: DispatcherClient,
) -> None:
    first = snapshot(seed=4)
    session_id = open_session(stub, first)
    held = {u.node_id for r in first.running_jobs for u in r.units}
    busy = next(i for i, n in enumerate(first.nodes) if n.id in held)
    with pytest.raises(grpc.RpcError) as caught:
        update(stub, session_id, 1, first.time, started=[running_on(first, busy, "big", 32)])
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "started[0].units[0]" in error_fields(caught.value)
    answer = update(stub, session_id, 1, first.time, decide=True)
    assert starts(answer.decision) == starts(client.dispatch(first))


# -- FAILED_PRECONDITION: the caller resyncs ------------------------------------------------


def failure_of(call: object) -> str:
    with pytest.raises(grpc.RpcError) as caught:
        call()  # type: ignore[operator]
    assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    return session_failure(caught.value)


def test_deltas_that_cannot_apply_name_their_reason(stub: pb_grpc.SessionServiceStub) -> None:
    first = snapshot(seed=5)
    session_id = open_session(stub, first)
    t = first.time
    assert failure_of(lambda: update(stub, session_id, 2, t)) == "SEQUENCE_GAP"
    assert failure_of(lambda: update(stub, session_id, 1, t,
                                     ended_job_ids=["ghost"])) == "UNKNOWN_JOB"
    assert failure_of(lambda: update(stub, session_id, 1, t,
                                     cancelled_job_ids=["ghost"])) == "UNKNOWN_JOB"
    assert failure_of(lambda: update(stub, session_id, 1, t, submitted=[
        pb.QueuedJob(id=first.queued_jobs[0].id, user="u", units=1, unit_request={"core": 1},
                     requested_time=60)])) == "JOB_CONFLICT"
    assert failure_of(lambda: update(stub, session_id, 1, t - 1)) == "TIME_BACKWARDS"
    assert failure_of(lambda: update(stub, "no-such", 1, t)) == "UNKNOWN_SESSION"
    foreign = "0000ffff-" + session_id.split("-", 1)[1]
    assert failure_of(lambda: update(stub, foreign, 1, t)) == "SERVER_RESTARTED"
    assert update(stub, session_id, 1, t).sequence == 1  # none of the above changed it


def test_failures_are_counted_by_reason(server: RunningServer,
                                        stub: pb_grpc.SessionServiceStub) -> None:
    assert server.metrics is not None
    registry = server.metrics.registry
    name = "hpcdispatch_session_failures_total"
    before = registry.get_sample_value(name, {"reason": "unknown_session"}) or 0.0
    failure_of(lambda: update(stub, "nope", 1, 0))
    assert registry.get_sample_value(name, {"reason": "unknown_session"}) == before + 1
    assert (registry.get_sample_value("hpcdispatch_sessions_open") or 0) >= 1


def test_sessions_beyond_the_bound_evict_the_least_recently_used() -> None:
    running = start(max_sessions=2)
    try:
        with grpc.insecure_channel(running.target) as channel:
            stub = pb_grpc.SessionServiceStub(channel)
            first = snapshot(seed=6)
            ids = [open_session(stub, first) for _ in range(2)]
            update(stub, ids[0], 1, first.time)  # ids[1] is now the least recently used
            third = open_session(stub, first)
            assert failure_of(lambda: update(stub, ids[1], 1, first.time)) == "SESSION_EXPIRED"
            assert update(stub, ids[0], 2, first.time).sequence == 2
            assert update(stub, third, 1, first.time).sequence == 1
            stub.CloseSession(pb.CloseSessionRequest(session_id=third), timeout=60)
            # A closed session is simply unknown.
            assert failure_of(lambda: update(stub, third, 2, first.time)) == "UNKNOWN_SESSION"
    finally:
        running.stop(grace=1.0)


def test_idle_sessions_expire() -> None:
    now = [0.0]
    store = SessionStore(max_sessions=4, idle_seconds=10.0, clock=lambda: now[0])
    state = SessionState("c", synthetic_snapshot(SYSTEM, 2, 0.5, seed=1))
    kept, idle = store.open(state), store.open(state)
    now[0] = 6.0
    store.get(kept.id)
    now[0] = 12.0
    assert store.get(kept.id) is kept
    with pytest.raises(SessionGone) as gone:
        store.get(idle.id)
    assert gone.value.reason is GoneReason.EXPIRED
    assert len(store) == 1


# -- the client: deltas computed from full snapshots, resync on its own ----------------------


def test_the_client_resyncs_when_the_server_forgot_its_session(
    server: RunningServer, client: DispatcherClient,
) -> None:
    first = snapshot(seed=7)
    session = client.session()
    assert starts(session.decide(first)) == starts(client.dispatch(first))
    assert session.session_id is not None
    stub = pb_grpc.SessionServiceStub(client._channel)
    stub.CloseSession(pb.CloseSessionRequest(session_id=session.session_id), timeout=60)
    second = pb.DispatchRequest()
    second.CopyFrom(first)
    second.time += 30
    del second.queued_jobs[0]
    assert starts(session.decide(second)) == starts(client.dispatch(second))
    assert session.resyncs == 1 and session.reasons["UNKNOWN_SESSION"] == 1
    third = pb.DispatchRequest()
    third.CopyFrom(second)
    third.time += 30
    assert starts(session.decide(third)) == starts(client.dispatch(third))
    assert session.deltas == 1 and session.resyncs == 1


def test_the_client_sends_a_delta_only_when_one_says_the_change() -> None:
    first = snapshot(seed=8)
    same = pb.DispatchRequest()
    same.CopyFrom(first)
    delta = delta_between(first, same)
    assert delta is not None
    assert not (delta.node_changes or delta.started or delta.ended_job_ids or delta.submitted
                or delta.cancelled_job_ids)
    reordered = pb.DispatchRequest()
    reordered.CopyFrom(first)
    reordered.queued_jobs[0].CopyFrom(first.queued_jobs[1])
    reordered.queued_jobs[1].CopyFrom(first.queued_jobs[0])
    assert delta_between(first, reordered) is None
    fewer_nodes = pb.DispatchRequest()
    fewer_nodes.CopyFrom(first)
    del fewer_nodes.nodes[-1]
    assert delta_between(first, fewer_nodes) is None
    changed = pb.DispatchRequest()
    changed.CopyFrom(first)
    changed.nodes[2].state = pb.NODE_STATE_DRAINED
    changed.running_jobs[-1].expected_duration = 77  # changed: ended and started again
    delta = delta_between(first, changed)
    assert delta is not None
    assert [c.id for c in delta.node_changes] == [first.nodes[2].id]
    assert list(delta.ended_job_ids) == [first.running_jobs[-1].id]
    assert [j.id for j in delta.started] == [first.running_jobs[-1].id]


def test_the_clients_delta_carries_node_labels_and_windows() -> None:
    """Issue #50: a node whose partitions or features changed is a node change with its
    labels; changed windows are sent whole, and windows that went away are cleared (set and
    empty); unchanged ones are not sent."""
    first = snapshot(seed=8)
    first.windows.add(node_ids=[first.nodes[0].id], start_time=first.time + 10,
                      end_time=first.time + 20)
    changed = pb.DispatchRequest()
    changed.CopyFrom(first)
    changed.nodes[1].features.append("ib")
    delta = delta_between(first, changed)
    assert delta is not None and not delta.HasField("windows")
    assert [(c.id, list(c.labels.features)) for c in delta.node_changes] == [
        (first.nodes[1].id, ["ib"])]
    changed.ClearField("windows")
    delta = delta_between(first, changed)
    assert delta is not None and delta.HasField("windows") and not delta.windows.windows
