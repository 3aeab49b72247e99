"""SessionService: open a session with a full snapshot, then decide on deltas (the contract's
"Sessions" section in dispatcher.proto).

A session call that decides goes through the same decision front as Dispatch (admission
control, decision threads, pipeline, independent check, metrics, answer); only the snapshot comes
from the session's memory instead of the request, with what the running work makes of the nodes
(kept by the session as deltas apply, instead of recomputed from every running job) and the
facts the independent check reads.

Nothing is left half-done (the contract's "Sessions" section):
- OpenSession stores the session only once it can answer (after its decision, with `decide`):
  a refused, invalid or abandoned OpenSession creates nothing and evicts nothing;
- UpdateSession checks the delta, and a deciding call gets its decision slot, before the
  session changes, so a refused or invalid call leaves it as it was; once applied, the delta
  is remembered with its answer (server/sessions/resend.py), and a resend of the same request
  gets that answer, or a decision on the state the delta made when the first call ended in an
  error (deadline, caller gone) before answering;
- a call on a session that another call holds is answered at once, ABORTED (SESSION_BUSY):
  it takes no decision slot and no thread for longer than that answer;
- a call that fails on an error of the server's own (a bug, not the caller's) may have left
  the session's state half changed: the error is logged once with its traceback, the session
  is forgotten, and the call (and any later one naming the session) is answered
  FAILED_PRECONDITION, INTERNAL_ERROR: the caller resyncs with a full snapshot.

A session belongs to the identity that opened it (the mTLS client certificate's names, "" without
one; see server/sessions/store.py): another identity's calls naming it are answered as for an
unknown session. Session ids are secrets: logs and errors name a session by its tag only.

StreamSession answers the same calls on one bidirectional stream, each message by the method
of its call here (server/rpc/session_stream.py). The methods here are synchronous: the server
runs each call, and each message of a stream, in one of its pool threads.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any, NoReturn

import grpc
import structlog
from google.rpc import error_details_pb2

from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc

from ..domain.caller_scope import CallerScope
from ..intake.decision_options import DecisionOptions
from ..intake.interruption import Interruption
from ..intake.session_delta import CheckedDelta, check_delta, delta_digest
from ..intake.snapshot_intake import SnapshotIntake
from ..intake.validation import Violation
from ..pipeline import DecisionAbandoned
from ..sessions.resend import LastDelta
from ..sessions.state import SessionState
from ..sessions.store import (
    GoneReason,
    Session,
    SessionBusy,
    SessionGone,
    SessionStore,
    session_tag,
)
from .call_pool import CallPool
from .decision_front import DecisionFront, DecisionSlot, predictor_name
from .draining import Drain
from .errors import abort_invalid_argument, abort_with_details
from .metrics import dispatcher_label, status_label
from .session_stream import SessionStreams, StreamCalls, Unary
from .thread_context import CallAborted
from .tls import caller_identity

log = structlog.get_logger("hpcdispatch.sessions")

ERROR_DOMAIN = "hpcdispatch.v1"
# The ErrorInfo reason of a call refused because another call holds its session (ABORTED).
SESSION_BUSY = "SESSION_BUSY"
# The contract's SessionFailure of each reason the store finds no live session.
GONE_FAILURES = {
    GoneReason.EXPIRED: pb.SESSION_FAILURE_SESSION_EXPIRED,
    GoneReason.SERVER_RESTARTED: pb.SESSION_FAILURE_SERVER_RESTARTED,
    GoneReason.UNKNOWN: pb.SESSION_FAILURE_UNKNOWN_SESSION,
    GoneReason.INTERNAL_ERROR: pb.SESSION_FAILURE_INTERNAL_ERROR,
}


def failure_name(reason: int) -> str:
    """pb.SESSION_FAILURE_SEQUENCE_GAP -> "SEQUENCE_GAP" (the ErrorInfo reason)."""
    return pb.SessionFailure.Name(pb.SessionFailure.ValueType(reason)).removeprefix(
        "SESSION_FAILURE_")


def abort_with_reason(
    context: grpc.ServicerContext, code: grpc.StatusCode, reason: str, message: str,
    session_id: str,
) -> None:
    """`code` with an ErrorInfo: the reason, and the session's tag (its id is a secret, and may
    be anything the caller sent)."""
    info = error_details_pb2.ErrorInfo(
        reason=reason, domain=ERROR_DOMAIN, metadata={"session": session_tag(session_id)},
    )
    abort_with_details(context, code, message, [info])


def abort_failed_precondition(
    context: grpc.ServicerContext, reason: int, message: str, session_id: str
) -> None:
    abort_with_reason(context, grpc.StatusCode.FAILED_PRECONDITION, failure_name(reason),
                      f"{message}; resync with a full snapshot", session_id)


def interruption_of(context: grpc.ServicerContext, received: float) -> Interruption:
    """Stops a session's intake once the caller's deadline has passed or it has gone."""
    left = context.time_remaining()
    return Interruption(None if left is None else received + left,
                        lambda: not context.is_active())


def abort_abandoned(context: grpc.ServicerContext, abandoned: DecisionAbandoned) -> None:
    log.warning("session call abandoned", stage=abandoned.stage, cancelled=abandoned.cancelled)
    context.abort(grpc.StatusCode.CANCELLED if abandoned.cancelled
                  else grpc.StatusCode.DEADLINE_EXCEEDED, str(abandoned))


class SessionServicer(pb_grpc.SessionServiceServicer):
    """The session RPCs, deciding through the decision front Dispatch uses."""

    def __init__(
        self, front: DecisionFront, intake: SnapshotIntake, drain: Drain, pool: CallPool,
        report_completions: Unary, store: SessionStore | None = None,
    ) -> None:
        """`report_completions`: DispatcherService.ReportCompletions, which answers a stream's
        completion reports; `drain`: the server's, which a stream's messages are counted in;
        `pool`: the threads a stream's messages are answered in."""
        self.front = front
        self.intake = intake
        self.config = front.config
        self.metrics = metrics = front.metrics
        self.store = store if store is not None else SessionStore(
            self.config.max_sessions, self.config.session_idle_seconds,
            on_forget=lambda why: metrics.sessions_forgotten.labels(why).inc(),
            max_per_owner=self.config.max_sessions_per_identity,
        )
        metrics.sessions_open.set_function(lambda: len(self.store))
        self.streams = SessionStreams(
            StreamCalls(self.OpenSession, self.UpdateSession, self.CloseSession,
                        report_completions), pool, drain, metrics,
            self.config.stream_idle_seconds, room=lambda: room_now(front))

    # -- RPCs ----------------------------------------------------------------------------------

    def OpenSession(
        self, request: pb.OpenSessionRequest, context: grpc.ServicerContext
    ) -> pb.OpenSessionResponse:
        try:
            return self._open(request, context)
        except CallAborted:
            raise
        except Exception as error:  # the server's own; no session was stored
            log.error("session not opened: internal error", error=repr(error), exc_info=error)
            context.abort(grpc.StatusCode.INTERNAL,
                          f"the server failed opening the session ({type(error).__name__}, "
                          "logged); nothing was stored")
            raise AssertionError("unreachable") from None  # pragma: no cover

    def _open(
        self, request: pb.OpenSessionRequest, context: grpc.ServicerContext
    ) -> pb.OpenSessionResponse:
        received = time.monotonic()
        full = request.snapshot
        try:
            intake = self.intake.session(full, interruption_of(context, received))
        except DecisionAbandoned as abandoned:
            abort_abandoned(context, abandoned)
            raise AssertionError("unreachable") from None  # pragma: no cover
        if intake.violations:
            self._reject(context, "invalid snapshot", [
                Violation(f"snapshot.{v.field}", v.description) for v in intake.violations
            ])
        snapshot, nodes, options = intake.snapshot, intake.nodes, intake.options
        assert snapshot is not None and nodes is not None and options is not None
        try:  # only the promises it signed
            snapshot = self.front.promises.verified_snapshot(
                snapshot, CallerScope(caller_identity(context), options.cluster),
                interruption_of(context, received))
        except DecisionAbandoned as abandoned:
            abort_abandoned(context, abandoned)
        state = SessionState(options.cluster, snapshot, nodes)
        response = pb.OpenSessionResponse(sequence=0)
        if request.decide:
            # Decided before the session exists: a refusal or an abandoned decision leaves
            # nothing behind, and no live session is evicted for it.
            with self.front.slot(options.dispatcher, context, received,
                                 options.settings.profile) as slot:
                response.decision.CopyFrom(self._decide(state, options, slot, received))
            if not context.is_active():  # nobody would learn the new session's id
                left = context.time_remaining()
                abort_abandoned(context, DecisionAbandoned(
                    "answer", cancelled=left is None or left > 0))
        session = self.store.open(state, caller_identity(context))
        log.info("session opened", session=session.tag, cluster=state.cluster,
                 nodes=len(state.nodes), running=len(state.running), queued=len(state.queued))
        response.session_id = session.id
        return response

    def UpdateSession(
        self, request: pb.UpdateSessionRequest, context: grpc.ServicerContext
    ) -> pb.UpdateSessionResponse:
        received = time.monotonic()
        self._check_session_id(context, request.session_id)
        try:
            session = self.store.get(request.session_id, caller_identity(context))
        except SessionGone as gone:
            self._fail(context, GONE_FAILURES[gone.reason], str(gone), request.session_id)
            raise AssertionError("unreachable") from None  # pragma: no cover
        try:
            with session.exclusive():
                try:
                    last = session.last
                    if last is not None and last.repeated_by(request.sequence,
                                                             lambda: delta_digest(request)):
                        return self._answer_again(session, last, request, context, received)
                    return self._apply(session, request, context, received)
                except CallAborted:  # the call's own answer (an error it was meant to get)
                    raise
                except Exception as error:  # the server's own: the session cannot be trusted
                    self._failed_internally(context, session, error)
        except SessionBusy as busy:
            self.metrics.session_busy.inc()
            log.info("session busy", session=session.tag)
            abort_with_reason(context, grpc.StatusCode.ABORTED, SESSION_BUSY, str(busy),
                              session.id)
            raise AssertionError("unreachable") from None  # pragma: no cover

    def CloseSession(
        self, request: pb.CloseSessionRequest, context: grpc.ServicerContext
    ) -> pb.CloseSessionResponse:
        self._check_session_id(context, request.session_id)
        if self.store.close(request.session_id, caller_identity(context)):
            log.info("session closed", session=session_tag(request.session_id))
        return pb.CloseSessionResponse()

    async def StreamSession(
        self, request_iterator: AsyncIterator[pb.SessionStreamRequest], context: Any,
    ) -> AsyncIterator[pb.SessionStreamResponse]:
        """The calls above on one stream, each message answered as its unary call
        (server/rpc/session_stream.py); on the server's event loop, unlike the others, which
        run in a pool thread (server/rpc/call_pool.py)."""
        async for answer in self.streams.serve(request_iterator, context):
            yield answer

    # -- a delta, and its resend ----------------------------------------------------------

    def _apply(
        self, session: Session, request: pb.UpdateSessionRequest,
        context: grpc.ServicerContext, received: float,
    ) -> pb.UpdateSessionResponse:
        """Check the delta, apply it (once a deciding call has its slot), decide, answer; the
        delta is remembered from the moment it is applied, its answer once given."""
        state = session.state
        try:
            checked = check_delta(state, request, self.config, self.front.predictors.kinds(),
                                  interruption_of(context, received))
        except DecisionAbandoned as abandoned:
            abort_abandoned(context, abandoned)
        if checked.failure is not None:
            self._fail(context, checked.failure.reason, checked.failure.message, session.id)
        if checked.violations:
            self._reject(context, "invalid delta", checked.violations)
        try:  # only the promises it signed (after those the session holds)
            replaced = {q.id for q in checked.submitted}
            promising = any(q.promised_start is not None for q in checked.submitted)
            checked.submitted = self.front.promises.verified(
                checked.submitted, CallerScope(caller_identity(context), state.cluster),
                request.time, interruption_of(context, received),
                held=[q for q in state.queued.values() if q.id not in replaced] if promising
                else ())
        except DecisionAbandoned as abandoned:
            abort_abandoned(context, abandoned)
        digest = delta_digest(request)
        if not request.decide:
            apply_checked(state, request, checked)
            answer = pb.UpdateSessionResponse(sequence=state.sequence)
            session.last = LastDelta[pb.UpdateSessionResponse](
                request.sequence, digest, None, answer)
            return answer
        options = checked.options
        assert options is not None  # set: the delta is ok
        with self.front.slot(options.dispatcher, context, received,
                             options.settings.profile) as slot:
            apply_checked(state, request, checked)
            session.last = last = LastDelta[pb.UpdateSessionResponse](
                request.sequence, digest, options)
            decision = self._decide(state, options, slot, received)
        last.answer = pb.UpdateSessionResponse(sequence=state.sequence, decision=decision)
        return last.answer

    def _answer_again(
        self, session: Session, last: LastDelta[pb.UpdateSessionResponse],
        request: pb.UpdateSessionRequest,
        context: grpc.ServicerContext, received: float,
    ) -> pb.UpdateSessionResponse:
        """A resend of the applied delta `last`: its answer, or, when its call ended before
        answering, a decision on the state it made (applied nothing again either way)."""
        answer = last.answer
        self.metrics.session_resends.labels("kept" if answer is not None else "decided").inc()
        log.info("session delta resent", session=session.tag, sequence=last.sequence,
                 answered=answer is not None)
        if answer is not None:
            return answer
        assert last.options is not None  # a call without decision answers as it applies
        with self.front.slot(last.options.dispatcher, context, received,
                             last.options.settings.profile) as slot:
            decision = self._decide(session.state, last.options, slot, received)
        last.answer = pb.UpdateSessionResponse(sequence=last.sequence, decision=decision)
        return last.answer

    # -- errors --------------------------------------------------------------------------------

    def _fail(self, context: grpc.ServicerContext, reason: int, message: str,
              session_id: str) -> None:
        self.metrics.count_session_failure(reason)
        log.info("session resync asked", reason=failure_name(reason),
                 session=session_tag(session_id), detail=message)
        abort_failed_precondition(context, reason, message, session_id)

    def _failed_internally(self, context: grpc.ServicerContext, session: Session,
                           error: Exception) -> NoReturn:
        """A call on `session` failed with an error of the server's own (a bug), perhaps with
        its delta half applied: the error is logged once with its traceback, the session
        forgotten, and the caller told to resync (FAILED_PRECONDITION, INTERNAL_ERROR), as a
        later call naming the session is."""
        self.store.forget_failed(session)
        self.metrics.count_session_failure(pb.SESSION_FAILURE_INTERNAL_ERROR)
        log.error("session failed on an internal error; forgotten, its caller resyncs",
                  session=session.tag, cluster=session.state.cluster,
                  sequence=session.state.sequence, error=repr(error), exc_info=error)
        abort_failed_precondition(
            context, pb.SESSION_FAILURE_INTERNAL_ERROR,
            f"the server failed on session {session.tag} ({type(error).__name__}, logged) and "
            "forgot it", session.id)
        raise AssertionError("unreachable") from None  # pragma: no cover

    def _check_session_id(self, context: grpc.ServicerContext, session_id: str) -> None:
        """A session id within `max_id_chars` (no id this server makes is longer)."""
        limit = self.config.max_id_chars
        if len(session_id) > limit:
            self._reject(context, "invalid session id", [Violation(
                "session_id", f"{len(session_id)} characters exceed the limit of {limit} "
                "(max_id_chars)")])

    @staticmethod
    def _reject(context: grpc.ServicerContext, what: str, violations: list[Violation]) -> None:
        log.warning(what, violations=len(violations), first=violations[0].field)
        abort_invalid_argument(context, f"{what}: {len(violations)} problem(s), first: "
                               f"{violations[0].field}: {violations[0].description}", violations)

    # -- deciding ------------------------------------------------------------------------------

    def _decide(
        self, state: SessionState, options: DecisionOptions, slot: DecisionSlot,
        received: float,
    ) -> pb.DispatchResponse:
        """Decide on the session's state as it is now (its snapshot with the durations of the
        predictor asked for, its occupancy, its facts for the check)."""

        decided = self.front.decide_built(state.situation, options, slot, received)
        response, result, snapshot = decided.response, decided.result, decided.situation.snapshot
        state.hold_promises((e.job_id, e.start_time, e.promise_token)  # the session keeps them
                            for e in response.report.expected_starts if e.promised)
        report, kind = response.report, slot.kind
        self.metrics.session_decision_seconds.labels(dispatcher_label(kind)).observe(
            report.total_seconds)
        log.info(
            "session decision", dispatcher=dispatcher_label(kind),
            status=status_label(report.status), predictor=predictor_name(decided.predictor),
            sequence=state.sequence, queued=len(snapshot.queued), running=len(snapshot.running),
            started=len(response.starts), total_s=round(report.total_seconds, 4),
            snapshot_s=round(decided.situation_seconds, 4),
            stages={k: round(v, 4) for k, v in result.stage_seconds.items()},
            fallback=result.fallback_reason or None,
        )
        return response


def room_now(front: DecisionFront) -> bool:
    """Whether a decision would get a decision thread and an admission slot at once (nobody
    waits for one): a short stream message may then be answered on the loop."""
    admission = front.admission
    return front.threads.free > 0 and not admission.waiting and admission.busy < admission.slots


def apply_checked(state: SessionState, request: pb.UpdateSessionRequest,
                  checked: CheckedDelta) -> None:
    """Apply a delta check_delta accepted (whole: applying never fails)."""
    state.apply(request.time, request.sequence, checked.node_changes, request.ended_job_ids,
                request.cancelled_job_ids, checked.submitted, checked.started, checked.windows)
