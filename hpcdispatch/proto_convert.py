"""Conversions between the wire messages (hpcdispatch.v1) and the domain types."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from google.protobuf.internal.containers import RepeatedCompositeFieldContainer

from hpcdispatch.snapshot import (
    Decision,
    JobCompletion,
    JobStart,
    Node,
    NodeState,
    QueuedJob,
    RunningJob,
    Snapshot,
    UnavailabilityWindow,
    UnitAllocation,
)
from hpcdispatch.v1 import dispatcher_pb2 as pb

_STATE_FROM_PB = {
    pb.NODE_STATE_UP: NodeState.UP,
    pb.NODE_STATE_DOWN: NodeState.DOWN,
    pb.NODE_STATE_DRAINED: NodeState.DRAINED,
}
_STATE_TO_PB = {v: k for k, v in _STATE_FROM_PB.items()}


def nodes_from_pb(request: pb.DispatchRequest) -> tuple[Node, ...]:
    return tuple(map(node_from_pb, request.nodes))


def node_from_pb(n: pb.Node) -> Node:
    return Node(n.id, _STATE_FROM_PB[n.state], dict(n.capacity), tuple(n.partitions),
                tuple(n.features))


def window_from_pb(w: pb.UnavailabilityWindow) -> UnavailabilityWindow:
    return UnavailabilityWindow(tuple(w.node_ids), w.start_time, w.end_time, tuple(w.users),
                                tuple(w.accounts), w.name)


def windows_from_pb(windows: Iterable[pb.UnavailabilityWindow]
                    ) -> tuple[UnavailabilityWindow, ...]:
    return tuple(map(window_from_pb, windows))


def add_windows(out: RepeatedCompositeFieldContainer[pb.UnavailabilityWindow],
                windows: Iterable[UnavailabilityWindow]) -> None:
    """Append `windows` to a repeated UnavailabilityWindow field."""
    for w in windows:
        out.add(node_ids=w.nodes, start_time=w.start, end_time=w.end, users=w.users,
                accounts=w.accounts, name=w.name)


def running_job_from_pb(j: pb.RunningJob) -> RunningJob:
    return RunningJob(
        id=j.id,
        user=j.user,
        name=j.name,
        start_time=j.start_time,
        requested_time=j.requested_time,
        expected_duration=j.expected_duration if j.HasField("expected_duration") else None,
        units=tuple([UnitAllocation(u.node_id, dict(u.amounts)) for u in j.units]),
    )


def queued_job_from_pb(j: pb.QueuedJob) -> QueuedJob:
    return QueuedJob(
        id=j.id,
        user=j.user,
        name=j.name,
        queue=j.queue,
        submit_time=j.submit_time,
        units=j.units,
        unit_request=dict(j.unit_request),
        requested_time=j.requested_time,
        actual_duration=j.actual_duration if j.HasField("actual_duration") else None,
        promised_start=j.promised_start if j.HasField("promised_start") else None,
        promise_token=j.promise_token,
        priority=j.priority,
        partitions=tuple(j.partitions),
        required_features=tuple(j.required_features),
        account=j.account,
        feature_alternatives=tuple(tuple(term.features) for term in j.feature_alternatives),
        reservation=j.reservation,
    )


def snapshot_from_pb(
    request: pb.DispatchRequest, nodes: tuple[Node, ...] | None = None
) -> Snapshot:
    """Convert a validated request (see hpcdispatch.server.intake.validation) to a Snapshot.

    `nodes` is `nodes_from_pb(request)` when the caller already has it.
    """
    return Snapshot(
        time=request.time,
        nodes=nodes if nodes is not None else nodes_from_pb(request),
        running=tuple(map(running_job_from_pb, request.running_jobs)),
        queued=tuple(map(queued_job_from_pb, request.queued_jobs)),
        windows=windows_from_pb(request.windows),
    )


def snapshot_to_pb(snapshot: Snapshot, request: pb.DispatchRequest | None = None) -> (
    pb.DispatchRequest
):
    """Fill `request` (or a new one) with the snapshot's time, nodes and jobs."""
    out = request if request is not None else pb.DispatchRequest()
    out.time = snapshot.time
    for n in snapshot.nodes:
        out.nodes.add(id=n.id, state=_STATE_TO_PB[n.state], capacity=dict(n.capacity),
                      partitions=n.partitions, features=n.features)
    add_running_jobs(out.running_jobs, snapshot.running)
    add_queued_jobs(out.queued_jobs, snapshot.queued)
    add_windows(out.windows, snapshot.windows)
    return out


def add_running_jobs(jobs: RepeatedCompositeFieldContainer[pb.RunningJob],
                     running: Iterable[RunningJob]) -> None:
    """Append `running` to a repeated RunningJob field (a snapshot's, a delta's `started`)."""
    for r in running:
        msg = jobs.add(
            id=r.id, user=r.user, name=r.name, start_time=r.start_time,
            requested_time=r.requested_time,
        )
        if r.expected_duration is not None:
            msg.expected_duration = r.expected_duration
        for u in r.units:
            msg.units.add(node_id=u.node_id, amounts=dict(u.amounts))


def add_queued_jobs(jobs: RepeatedCompositeFieldContainer[pb.QueuedJob],
                    queued: Iterable[QueuedJob]) -> None:
    """Append `queued` to a repeated QueuedJob field (a snapshot's, a delta's `submitted`)."""
    for q in queued:
        qmsg = jobs.add(
            id=q.id, user=q.user, name=q.name, queue=q.queue, submit_time=q.submit_time,
            units=q.units, unit_request=dict(q.unit_request), requested_time=q.requested_time,
        )
        if q.actual_duration is not None:
            qmsg.actual_duration = q.actual_duration
        if q.promised_start is not None:
            qmsg.promised_start = q.promised_start
        if q.promise_token:
            qmsg.promise_token = q.promise_token
        if q.priority:
            qmsg.priority = q.priority
        if q.partitions:
            qmsg.partitions.extend(q.partitions)
        if q.required_features:
            qmsg.required_features.extend(q.required_features)
        if q.account:
            qmsg.account = q.account
        for term in q.feature_alternatives:
            qmsg.feature_alternatives.add(features=term)
        if q.reservation:
            qmsg.reservation = q.reservation


def add_starts(
    response: pb.DispatchResponse, starts: Iterable[JobStart],
    unit_requests: Mapping[str, Mapping[str, int]],
) -> None:
    """Append `starts` to `response.starts`, each unit with its node and its job's per-unit
    request (`unit_requests` by job id).

    One UnitPlacement per distinct request is built and, given each unit's node in turn,
    appended (copied) per unit: the request's map is made once, not once per unit (the bulk of
    a large decision's answer).
    """
    units: dict[tuple[tuple[str, int], ...], pb.UnitPlacement] = {}  # by the request's items
    add = response.starts.add
    for start in starts:
        request = unit_requests[start.job_id]
        key = tuple(request.items())
        unit = units.get(key)
        if unit is None:
            unit = units[key] = pb.UnitPlacement(amounts=request)
        append = add(job_id=start.job_id, expected_duration=start.expected_duration).units.append
        for node_id in start.nodes:
            unit.node_id = node_id
            append(unit)


def decision_from_pb(response: pb.DispatchResponse) -> Decision:
    return Decision(
        time=response.time,
        starts=[
            JobStart(s.job_id, tuple(u.node_id for u in s.units), s.expected_duration,
                     tuple(u.amounts for u in s.units))  # the answer's maps, not copied
            for s in response.starts
        ],
    )


def completion_to_pb(c: JobCompletion) -> pb.JobCompletion:
    return pb.JobCompletion(
        job_id=c.job_id, user=c.user, name=c.name, queue=c.queue, units=c.units,
        unit_request=c.unit_request, requested_time=c.requested_time, start_time=c.start_time,
        end_time=c.end_time,
    )
