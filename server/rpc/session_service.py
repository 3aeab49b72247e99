"""SessionService: open a session with a full snapshot, then decide on deltas (the contract's
"Sessions" section in dispatcher.proto).

A session call that decides goes through the same decision front as Dispatch (admission
control, decision threads, pipeline, independent check, metrics, answer); only the snapshot comes
from the session's memory instead of the request, with what the running work makes of the nodes
(kept by the session as deltas apply, instead of recomputed from every running job) and the
facts the independent check reads. The delta is checked before a decision slot
is asked for and applied once one is granted, so a refused or invalid call leaves the session
unchanged. A decision abandoned after that (deadline, caller gone) leaves the delta applied:
the caller's next delta then carries a sequence number the session has moved past, and it
resyncs.

A session belongs to the identity that opened it (the mTLS client certificate's names, "" without
one; see server/sessions/store.py): another identity's calls naming it are answered as for an
unknown session. Session ids are secrets: logs and errors name a session by its tag only.
"""

from __future__ import annotations

import time

import grpc
import structlog
from google.rpc import error_details_pb2

from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc

from ..intake.decision_options import DecisionOptions
from ..intake.interruption import Interruption
from ..intake.snapshot_intake import SnapshotIntake
from ..intake.validation import Violation
from ..pipeline import DecisionAbandoned
from ..sessions.delta import check_delta
from ..sessions.state import SessionState
from ..sessions.store import SessionGone, SessionStore, session_tag
from .decision_front import DecisionFront, DecisionSlot, predictor_name
from .errors import abort_invalid_argument, abort_with_details
from .metrics import dispatcher_label, status_label
from .tls import caller_identity

log = structlog.get_logger("hpcdispatch.sessions")

ERROR_DOMAIN = "hpcdispatch.v1"


def failure_name(reason: int) -> str:
    """pb.SESSION_FAILURE_SEQUENCE_GAP -> "SEQUENCE_GAP" (the ErrorInfo reason)."""
    return pb.SessionFailure.Name(pb.SessionFailure.ValueType(reason)).removeprefix(
        "SESSION_FAILURE_")


def abort_failed_precondition(
    context: grpc.ServicerContext, reason: int, message: str, session_id: str
) -> None:
    """FAILED_PRECONDITION with an ErrorInfo: the reason, and the session's tag (its id is a
    secret, and may be anything the caller sent)."""
    info = error_details_pb2.ErrorInfo(
        reason=failure_name(reason), domain=ERROR_DOMAIN,
        metadata={"session": session_tag(session_id)},
    )
    abort_with_details(context, grpc.StatusCode.FAILED_PRECONDITION,
                       f"{message}; resync with a full snapshot", [info])


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
        self, front: DecisionFront, intake: SnapshotIntake, store: SessionStore | None = None,
    ) -> None:
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

    # -- RPCs ----------------------------------------------------------------------------------

    def OpenSession(
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
        state = SessionState(options.cluster, snapshot, nodes)
        session = self.store.open(state, caller_identity(context))
        log.info("session opened", session=session.tag, cluster=state.cluster,
                 nodes=len(state.nodes), running=len(state.running), queued=len(state.queued))
        response = pb.OpenSessionResponse(session_id=session.id, sequence=0)
        if request.decide:
            with session.lock, self.front.slot(full.dispatcher, context, received) as slot:
                response.decision.CopyFrom(self._decide(state, options, slot, received))
        return response

    def UpdateSession(
        self, request: pb.UpdateSessionRequest, context: grpc.ServicerContext
    ) -> pb.UpdateSessionResponse:
        received = time.monotonic()
        self._check_session_id(context, request.session_id)
        try:
            session = self.store.get(request.session_id, caller_identity(context))
        except SessionGone as gone:
            self._fail(context, gone.reason, str(gone), request.session_id)
            raise AssertionError("unreachable") from None  # pragma: no cover
        with session.lock:
            state = session.state
            try:
                checked = check_delta(state, request, self.config,
                                      self.front.predictors.kinds(),
                                      interruption_of(context, received))
            except DecisionAbandoned as abandoned:
                abort_abandoned(context, abandoned)
            if checked.failure is not None:
                self._fail(context, checked.failure.reason, checked.failure.message, session.id)
            if checked.violations:
                self._reject(context, "invalid delta", checked.violations)

            def apply() -> None:
                for node_id, node_state, capacity in checked.node_changes:
                    state.set_node(node_id, node_state, capacity)
                state.end(request.ended_job_ids)
                state.cancel(request.cancelled_job_ids)
                state.submit(checked.submitted)
                state.start(checked.started)
                state.time = request.time
                state.sequence = request.sequence

            if not request.decide:
                apply()
                return pb.UpdateSessionResponse(sequence=state.sequence)
            options = checked.options
            assert options is not None  # set: the delta is ok
            with self.front.slot(request.dispatcher, context, received) as slot:
                apply()
                decision = self._decide(state, options, slot, received)
            return pb.UpdateSessionResponse(sequence=state.sequence, decision=decision)

    def CloseSession(
        self, request: pb.CloseSessionRequest, context: grpc.ServicerContext
    ) -> pb.CloseSessionResponse:
        self._check_session_id(context, request.session_id)
        if self.store.close(request.session_id, caller_identity(context)):
            log.info("session closed", session=session_tag(request.session_id))
        return pb.CloseSessionResponse()

    # -- errors --------------------------------------------------------------------------------

    def _fail(self, context: grpc.ServicerContext, reason: int, message: str,
              session_id: str) -> None:
        self.metrics.count_session_failure(reason)
        log.info("session resync asked", reason=failure_name(reason),
                 session=session_tag(session_id), detail=message)
        abort_failed_precondition(context, reason, message, session_id)

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
