"""A session of SessionService behind a full-snapshot API: give the whole state, send a delta.

`DispatchSession.decide(request)` takes the same full `DispatchRequest` as
`DispatcherClient.dispatch` and returns the same `DispatchResponse`. The first call opens a
session with the whole snapshot; each later one sends only what changed since the previous
call (`delta_between`), numbered with the next sequence number. When the server cannot apply
it (FAILED_PRECONDITION: sequence gap, unknown job, server restarted, session expired) or the
change cannot be written as a delta (a node removed or reordered, the cluster changed, time
going backwards, jobs reordered), the session is opened again with the whole snapshot, and
`resyncs` counts it. The caller does not see any of this, and gets the decision a full
snapshot would have got.

The previous request is kept by reference: do not modify a request after passing it.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TypeVar

import grpc
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc

_Job = TypeVar("_Job", pb.RunningJob, pb.QueuedJob)


def _changes(old: Sequence[_Job], new: Sequence[_Job]) -> tuple[list[str], list[_Job]] | None:
    """(ids of `old` jobs gone or changed, `new` jobs that are new or changed), or None when
    `new` is not `old`'s kept jobs in their order followed by the new ones (the order a session
    keeps) or repeats an id."""
    after = {j.id: j for j in new}
    if len(after) != len(new):
        return None  # repeated ids: let the full snapshot's validation name them
    gone = [j.id for j in old if after.get(j.id) != j]
    dropped = set(gone)
    kept = [j.id for j in old if j.id not in dropped]
    before = {j.id for j in old if j.id not in dropped}
    added = [j for j in new if j.id not in before]
    if len(kept) + len(added) != len(new) or any(
        k != j.id for k, j in zip(kept, new, strict=False)
    ):
        return None
    return gone, added


# The decision options a delta repeats from the request: the fields DispatchRequest and
# UpdateSessionRequest share, but the time and the search message (copied whole).
OPTION_FIELDS = ("dispatcher", "predictor", "allocator", "dispatcher_name", "predictor_name")


def delta_between(old: pb.DispatchRequest, new: pb.DispatchRequest) -> (
    pb.UpdateSessionRequest | None
):
    """The delta that turns a session holding `old` into one holding `new` (without session id
    or sequence number), or None when only a full snapshot can say it."""
    if new.cluster != old.cluster or new.time < old.time or len(new.nodes) < len(old.nodes):
        return None
    delta = pb.UpdateSessionRequest(time=new.time)
    for name in OPTION_FIELDS:
        setattr(delta, name, getattr(new, name))
    delta.search.CopyFrom(new.search)
    for i, node in enumerate(new.nodes):
        previous = old.nodes[i] if i < len(old.nodes) else None
        if previous is not None and previous.id != node.id:
            return None
        if previous is None or previous != node:
            if not node.capacity:
                return None  # an empty capacity means "unchanged" in a delta
            delta.node_changes.add(id=node.id, state=node.state, capacity=node.capacity)
    running = _changes(old.running_jobs, new.running_jobs)
    if running is None:
        return None
    ended, started = running
    # A queued job that starts leaves the queue through `started`, not `cancelled`.
    running_now = {j.id for j in started}
    queued = _changes([j for j in old.queued_jobs if j.id not in running_now], new.queued_jobs)
    if queued is None:
        return None
    cancelled, submitted = queued
    delta.ended_job_ids.extend(ended)
    delta.started.extend(started)
    delta.cancelled_job_ids.extend(cancelled)
    delta.submitted.extend(submitted)
    return delta


def session_failure(error: grpc.RpcError) -> str:
    """The ErrorInfo reason of a FAILED_PRECONDITION (e.g. "SEQUENCE_GAP"), or "unknown"."""
    status = rpc_status.from_call(error)  # type: ignore[arg-type]
    for detail in status.details if status is not None else ():
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return info.reason
    return "unknown"


# Dispatch of a whole snapshot: (request, timeout in seconds) -> decision.
FullDispatch = Callable[[pb.DispatchRequest, float], pb.DispatchResponse]


class DispatchSession:
    """Decisions through one server-side session, resynced transparently (module doc)."""

    def __init__(
        self, stub: pb_grpc.SessionServiceStub, timeout: float,
        full_dispatch: FullDispatch | None = None,
        check_reachable: Callable[[], None] | None = None,
    ) -> None:
        self._stub = stub
        # DispatcherClient.check_reachable: fail fast, before the first call, when no service
        # answers at the target (raises hpcdispatch.client.ServiceUnreachable).
        self._check_reachable = check_reachable
        self.timeout = timeout
        # A server without the session service (an older one, or a stand-in) answers
        # UNIMPLEMENTED: then every decision goes through `full_dispatch` (whole snapshots).
        self._full_dispatch = full_dispatch
        self.sessions_unsupported = False
        self.session_id: str | None = None
        self.sequence = 0
        self._last: pb.DispatchRequest | None = None
        self.opens = 0  # sessions opened, the first one included
        self.resyncs = 0  # opens after the first: the server's or the client's resyncs
        self.reasons: Counter[str] = Counter()  # resyncs by reason
        self.deltas = 0  # decisions answered on a delta

    def decide(
        self, request: pb.DispatchRequest, timeout: float | None = None
    ) -> pb.DispatchResponse:
        """The decision on the full state `request`, as `DispatcherClient.dispatch` gives it."""
        wait = self.timeout if timeout is None else timeout
        if self._check_reachable is not None:
            self._check_reachable()
        if self.sessions_unsupported and self._full_dispatch is not None:
            return self._full_dispatch(request, wait)
        if self.session_id is None or self._last is None:
            return self._open(request, wait, None)
        delta = delta_between(self._last, request)
        if delta is None:
            return self._open(request, wait, "NOT_A_DELTA")
        delta.session_id = self.session_id
        delta.sequence = self.sequence + 1
        delta.decide = True
        try:
            response = self._stub.UpdateSession(delta, timeout=wait, wait_for_ready=True)
        except grpc.RpcError as error:
            code = error.code()
            if code == grpc.StatusCode.FAILED_PRECONDITION:
                return self._open(request, wait, session_failure(error))
            if code != grpc.StatusCode.INVALID_ARGUMENT:  # the session's state is uncertain
                self._forget()
            raise
        self.sequence = response.sequence
        self._last = request
        self.deltas += 1
        return response.decision

    def close(self, timeout: float | None = None) -> None:
        """Forget the session on the server (best effort) and here."""
        if self.session_id is not None:
            with contextlib.suppress(grpc.RpcError):  # it expires on its own otherwise
                self._stub.CloseSession(pb.CloseSessionRequest(session_id=self.session_id),
                                        timeout=self.timeout if timeout is None else timeout)
        self._forget()

    def _open(
        self, request: pb.DispatchRequest, timeout: float, resync_reason: str | None
    ) -> pb.DispatchResponse:
        if resync_reason is not None:
            self.resyncs += 1
            self.reasons[resync_reason] += 1
            self.close(timeout)
        self._forget()
        try:
            response = self._stub.OpenSession(
                pb.OpenSessionRequest(snapshot=request, decide=True), timeout=timeout,
                wait_for_ready=True,
            )
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.UNIMPLEMENTED or self._full_dispatch is None:
                raise
            self.sessions_unsupported = True
            return self._full_dispatch(request, timeout)
        self.opens += 1
        self.session_id = response.session_id
        self.sequence = response.sequence
        self._last = request
        return response.decision

    def _forget(self) -> None:
        self.session_id = None
        self._last = None
        self.sequence = 0
