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
"""

from __future__ import annotations

import time

import grpc
import structlog
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc

from ..intake.decision_options import DecisionOptions
from ..intake.snapshot_intake import SnapshotIntake
from ..intake.validation import Violation
from ..sessions.delta import check_delta
from ..sessions.state import SessionState
from ..sessions.store import SessionGone, SessionStore
from .decision_front import DecisionFront, DecisionSlot, predictor_name
from .errors import abort_invalid_argument
from .metrics import dispatcher_label, status_label

log = structlog.get_logger("hpcdispatch.sessions")

ERROR_DOMAIN = "hpcdispatch.v1"


def failure_name(reason: int) -> str:
    """pb.SESSION_FAILURE_SEQUENCE_GAP -> "SEQUENCE_GAP" (the ErrorInfo reason)."""
    return pb.SessionFailure.Name(pb.SessionFailure.ValueType(reason)).removeprefix(
        "SESSION_FAILURE_")


def abort_failed_precondition(
    context: grpc.ServicerContext, reason: int, message: str, session_id: str
) -> None:
    info = error_details_pb2.ErrorInfo(
        reason=failure_name(reason), domain=ERROR_DOMAIN, metadata={"session_id": session_id}
    )
    detail = any_pb2.Any()
    detail.Pack(info)
    status = status_pb2.Status(
        code=code_pb2.FAILED_PRECONDITION, message=f"{message}; resync with a full snapshot",
        details=[detail],
    )
    context.abort_with_status(rpc_status.to_status(status))
    raise AssertionError("abort_with_status returned")  # pragma: no cover


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
        )
        metrics.sessions_open.set_function(lambda: len(self.store))

    # -- RPCs ----------------------------------------------------------------------------------

    def OpenSession(
        self, request: pb.OpenSessionRequest, context: grpc.ServicerContext
    ) -> pb.OpenSessionResponse:
        received = time.monotonic()
        full = request.snapshot
        intake = self.intake.session(full)
        if intake.violations:
            self._reject(context, "invalid snapshot", [
                Violation(f"snapshot.{v.field}", v.description) for v in intake.violations
            ])
        snapshot, nodes, options = intake.snapshot, intake.nodes, intake.options
        assert snapshot is not None and nodes is not None and options is not None
        state = SessionState(options.cluster, snapshot, nodes)
        session = self.store.open(state)
        log.info("session opened", session=session.id, cluster=state.cluster,
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
        try:
            session = self.store.get(request.session_id)
        except SessionGone as gone:
            self._fail(context, gone.reason, str(gone), request.session_id)
            raise AssertionError("unreachable") from None  # pragma: no cover
        with session.lock:
            state = session.state
            checked = check_delta(state, request, self.config, self.front.predictors.kinds())
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
        if self.store.close(request.session_id):
            log.info("session closed", session=request.session_id)
        return pb.CloseSessionResponse()

    # -- errors --------------------------------------------------------------------------------

    def _fail(self, context: grpc.ServicerContext, reason: int, message: str,
              session_id: str) -> None:
        self.metrics.count_session_failure(reason)
        log.info("session resync asked", reason=failure_name(reason), session=session_id,
                 detail=message)
        abort_failed_precondition(context, reason, message, session_id)

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
