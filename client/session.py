"""A session of SessionService behind a full-snapshot API: give the whole state, send a delta.

`DispatchSession.decide(request)` takes the same full `DispatchRequest` as
`DispatcherClient.dispatch` and returns the same `DispatchResponse`. The first call opens a
session with the whole snapshot; each later one sends only what changed since the previous
call (`delta_between`), numbered with the next sequence number. When the server cannot apply
it (FAILED_PRECONDITION: sequence gap, unknown job, server restarted, session expired, an
internal error of the server on the session's state) or the
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
from typing import Any, TypeVar

import grpc
from google.protobuf.message import Message
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc

from .session_stream import SessionStream, StreamRefused

_Job = TypeVar("_Job", pb.RunningJob, pb.QueuedJob)


def _changes(old: Sequence[_Job], new: Sequence[_Job]) -> tuple[list[str], list[_Job]] | None:
    """(ids of `old` jobs gone or changed, `new` jobs that are new or changed), or None when
    `new` is not `old`'s kept jobs in their order followed by the new ones (the order a session
    keeps) or repeats an id."""
    after = {j.id: j for j in new}
    if len(after) != len(new):
        return None  # repeated ids: let the full snapshot's validation name them
    gone = [j.id for j in old if not _same(after.get(j.id), j)]
    dropped = set(gone)
    kept = [j.id for j in old if j.id not in dropped]
    before = {j.id for j in old if j.id not in dropped}
    added = [j for j in new if j.id not in before]
    if len(kept) + len(added) != len(new) or any(
        k != j.id for k, j in zip(kept, new, strict=False)
    ):
        return None
    return gone, added


def _same(new: _Job | None, old: _Job) -> bool:
    """Whether `new` is `old` for the session: equal, or a queued job whose promise alone
    changed (`promised_start`, `promise_token`: the promise the server reported, sent back;
    a session keeps it on its own, the contract's "Sessions")."""
    if new is None or new == old:
        return new is not None
    if not isinstance(new, pb.QueuedJob):
        return False
    bare_new, bare_old = pb.QueuedJob(), pb.QueuedJob()
    bare_new.CopyFrom(new)
    bare_old.CopyFrom(old)
    for bare in (bare_new, bare_old):
        bare.ClearField("promised_start")
        bare.ClearField("promise_token")
    return bare_new == bare_old


# The decision options a delta repeats from the request: the fields DispatchRequest and
# UpdateSessionRequest share, but the time and the search message (copied whole).
OPTION_FIELDS = ("dispatcher", "predictor", "allocator", "dispatcher_name", "predictor_name")


def copy_options(delta: pb.UpdateSessionRequest, request: pb.DispatchRequest) -> None:
    """Set `delta`'s decision options (OPTION_FIELDS, the search message) to `request`'s."""
    for name in OPTION_FIELDS:
        setattr(delta, name, getattr(request, name))
    delta.search.CopyFrom(request.search)


def delta_between(old: pb.DispatchRequest, new: pb.DispatchRequest) -> (
    pb.UpdateSessionRequest | None
):
    """The delta that turns a session holding `old` into one holding `new` (without session id
    or sequence number), or None when only a full snapshot can say it."""
    if new.cluster != old.cluster or new.time < old.time or len(new.nodes) < len(old.nodes):
        return None
    delta = pb.UpdateSessionRequest(time=new.time)
    copy_options(delta, new)
    for i, node in enumerate(new.nodes):
        previous = old.nodes[i] if i < len(old.nodes) else None
        if previous is not None and previous.id != node.id:
            return None
        if previous is None or previous != node:
            if not node.capacity:
                return None  # an empty capacity means "unchanged" in a delta
            change = delta.node_changes.add(id=node.id, state=node.state, capacity=node.capacity)
            if previous is None or (list(previous.partitions), list(previous.features)) != (
                    list(node.partitions), list(node.features)):
                change.labels.partitions.extend(node.partitions)
                change.labels.features.extend(node.features)
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
    if list(new.windows) != list(old.windows):
        delta.windows.windows.extend(new.windows)
        delta.windows.SetInParent()  # set, even when it clears them all
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
# ReportCompletions as a unary call: (request, timeout in seconds) -> answer.
UnaryReport = Callable[[pb.ReportCompletionsRequest, float], pb.ReportCompletionsResponse]
# The unary SessionService method of each stream call.
UNARY_METHODS = {"open": "OpenSession", "update": "UpdateSession", "close": "CloseSession"}


class DispatchSession:
    """Decisions through one server-side session, resynced transparently (module doc)."""

    def __init__(
        self, stub: pb_grpc.SessionServiceStub, timeout: float,
        full_dispatch: FullDispatch | None = None,
        check_reachable: Callable[[], None] | None = None,
        stream: SessionStream | None = None,
        unary_report: UnaryReport | None = None,
    ) -> None:
        self._stub = stub
        # DispatcherClient.check_reachable: fail fast, before the first call, when no service
        # answers at the target (raises hpcdispatch.client.ServiceUnreachable).
        self._check_reachable = check_reachable
        self.timeout = timeout
        # A server without the session service (an older one, or a stand-in) answers
        # UNIMPLEMENTED: then every decision goes through `full_dispatch` (whole snapshots).
        self._full_dispatch = full_dispatch
        # The calls go on this stream while it is not refused (module doc), else unary.
        self.stream = stream
        self._stream_paused = False  # refused for lack of a thread: unary until the next open
        self._unary_report = unary_report
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
        delta = None
        if self.session_id is not None and self._last is not None:
            delta = delta_between(self._last, request)
            if delta is None:
                self._resync("NOT_A_DELTA", self.timeout if timeout is None else timeout)
        response = self.decide_change(delta, lambda: request, timeout)
        self._last = request if self.session_id is not None else None
        return response

    def decide_change(
        self, delta: pb.UpdateSessionRequest | None, whole: Callable[[], pb.DispatchRequest],
        timeout: float | None = None,
    ) -> pb.DispatchResponse:
        """The decision after `delta`, the change since the previous call (without session id
        or sequence number, as `delta_between` makes it), applied to the session; when there
        is no session yet, or `delta` is None, or the server cannot take it, the decision on
        the whole state `whole()` in a new session. For callers that know their changes
        without diffing two states (the replay simulator)."""
        wait = self.timeout if timeout is None else timeout
        if self._check_reachable is not None:
            self._check_reachable()
        if self.sessions_unsupported and self._full_dispatch is not None:
            return self._full_dispatch(whole(), wait)
        if self.session_id is None or delta is None:
            return self._open(whole(), wait)
        delta.session_id = self.session_id
        delta.sequence = self.sequence + 1
        delta.decide = True
        try:
            response: pb.UpdateSessionResponse = self._call("update", delta, wait)
        except grpc.RpcError as error:
            code = error.code()
            if code == grpc.StatusCode.FAILED_PRECONDITION:
                self._resync(session_failure(error), wait)
                return self._open(whole(), wait)
            if code != grpc.StatusCode.INVALID_ARGUMENT:  # the session's state is uncertain
                self._forget()
            raise
        self.sequence = response.sequence
        self.deltas += 1
        return response.decision

    def report_completions(self, request: pb.ReportCompletionsRequest,
                           timeout: float | None = None) -> int:
        """ReportCompletions, on the session's stream when it has one (in order with its
        decisions), else as the unary call; the completions accepted."""
        wait = self.timeout if timeout is None else timeout
        if self._streaming():
            assert self.stream is not None
            try:
                answer: pb.ReportCompletionsResponse = self.stream.call(
                    "report_completions", request, wait)
                return answer.accepted
            except StreamRefused as refused:
                self._stream_refused(refused)
        if self._unary_report is None:
            raise ValueError("no unary ReportCompletions given to this session")
        return self._unary_report(request, wait).accepted

    def close(self, timeout: float | None = None) -> None:
        """Forget the session on the server (best effort) and here; end its stream (a later
        decision starts another)."""
        self._close_session(self.timeout if timeout is None else timeout)
        if self.stream is not None:
            self.stream.close()

    def _call(self, kind: str, message: Message, timeout: float) -> Any:
        """One session call, on the stream while it is not refused, else unary."""
        if self._streaming():
            assert self.stream is not None
            try:
                return self.stream.call(kind, message, timeout)
            except StreamRefused as refused:  # nothing taken up: send it unary
                self._stream_refused(refused)
        method = getattr(self._stub, UNARY_METHODS[kind])
        return method(message, timeout=timeout, wait_for_ready=True)

    def _streaming(self) -> bool:
        return self.stream is not None and not self._stream_paused

    def _stream_refused(self, refused: StreamRefused) -> None:
        if refused.code() == grpc.StatusCode.UNIMPLEMENTED:
            self.stream = None  # a server without streams: unary from now on
        else:
            self._stream_paused = True  # no thread for a stream now: unary until the next open

    def _resync(self, reason: str, timeout: float) -> None:
        """Count a resync and close the session it replaces."""
        self.resyncs += 1
        self.reasons[reason] += 1
        self._close_session(timeout)

    def _close_session(self, timeout: float) -> None:
        """Forget the session on the server (best effort) and here, keeping the stream."""
        if self.session_id is not None:
            with contextlib.suppress(grpc.RpcError):  # it expires on its own otherwise
                self._call("close", pb.CloseSessionRequest(session_id=self.session_id),
                           timeout)
        self._forget()

    def _open(self, request: pb.DispatchRequest, timeout: float) -> pb.DispatchResponse:
        self._forget()
        self._stream_paused = False  # a new session tries the stream again
        try:
            response: pb.OpenSessionResponse = self._call(
                "open", pb.OpenSessionRequest(snapshot=request, decide=True), timeout)
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.UNIMPLEMENTED or self._full_dispatch is None:
                raise
            self.sessions_unsupported = True
            return self._full_dispatch(request, timeout)
        self.opens += 1
        self.session_id = response.session_id
        self.sequence = response.sequence
        return response.decision

    def _forget(self) -> None:
        self.session_id = None
        self._last = None
        self.sequence = 0
