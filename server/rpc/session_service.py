"""SessionService: open a session with a full snapshot, then decide on deltas (the contract's
"Sessions" section in dispatcher.proto).

A session call that decides goes through the same admission control, decision threads,
pipeline (`run_decision`), independent check and metrics as Dispatch; only the snapshot comes
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
from functools import partial

import grpc
import structlog
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from hpcdispatch.proto_convert import snapshot_from_pb
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc

from ..intake.validation import Violation, check_sizes, validate_dispatch_request
from ..pipeline import run_decision
from ..sessions.delta import check_delta, options_request
from ..sessions.state import SessionState
from ..sessions.store import SessionGone, SessionStore
from .dispatch_service import DecisionSlot, DispatcherService, predictor_name
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
    """The session RPCs over a DispatcherService (its admission, predictors and metrics)."""

    def __init__(self, service: DispatcherService, store: SessionStore | None = None) -> None:
        self.service = service
        self.config = service.config
        self.metrics = service.metrics
        metrics = self.metrics
        self.store = store if store is not None else SessionStore(
            self.config.max_sessions, self.config.session_idle_seconds,
            on_forget=None if metrics is None
            else (lambda why: metrics.sessions_forgotten.labels(why).inc()),
        )
        if metrics is not None:
            metrics.sessions_open.set_function(lambda: len(self.store))

    # -- RPCs ----------------------------------------------------------------------------------

    def OpenSession(
        self, request: pb.OpenSessionRequest, context: grpc.ServicerContext
    ) -> pb.OpenSessionResponse:
        received = time.monotonic()
        full = request.snapshot
        violations = check_sizes(full, self.config)
        table = None
        if not violations:
            table = self.service.node_tables.get(full)
            violations = validate_dispatch_request(
                full, self.config, self.service.predictors.kinds(), table.check
            )
        if violations:
            self._reject(context, "invalid snapshot", [
                Violation(f"snapshot.{v.field}", v.description) for v in violations
            ])
        assert table is not None and table.nodes is not None and table.index is not None
        state = SessionState(full.cluster or "default", snapshot_from_pb(full, table.nodes),
                             table.index)
        session = self.store.open(state)
        log.info("session opened", session=session.id, cluster=state.cluster,
                 nodes=len(state.nodes), running=len(state.running), queued=len(state.queued))
        response = pb.OpenSessionResponse(session_id=session.id, sequence=0)
        if request.decide:
            with session.lock, self.service.decision_slot(
                full.dispatcher, context, received
            ) as slot:
                response.decision.CopyFrom(self._decide(state, full, slot, received))
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
            checked = check_delta(state, request, self.config, self.service.predictors.kinds())
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
            options = options_request(request)
            options.cluster = state.cluster
            with self.service.decision_slot(request.dispatcher, context, received) as slot:
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
        if self.metrics is not None:
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
        self, state: SessionState, options: pb.DispatchRequest, slot: DecisionSlot,
        received: float,
    ) -> pb.DispatchResponse:
        service = self.service
        kind = slot.kind
        predictor_kind = options.predictor or service.default_predictor
        control = service.search_control(options, slot)
        predictor = service.predictors.predictor(state.cluster, predictor_kind)
        built = time.monotonic()
        snapshot = state.snapshot(predictor_kind, predictor)
        occupancy = state.occupancy(predictor_kind, predictor)
        snapshot_seconds = time.monotonic() - built
        result = run_decision(snapshot, kind, predictor, control, state.node_index(),
                              occupancy=occupancy, facts=state,
                              queued_durations=partial(state.queued_durations, predictor_kind,
                                                       predictor))
        response = service.answer(snapshot, result, kind, predictor_kind, control.settings,
                                  state.cluster, received)
        report = response.report
        if self.metrics is not None:
            self.metrics.session_decision_seconds.labels(dispatcher_label(kind)).observe(
                report.total_seconds)
        log.info(
            "session decision", dispatcher=dispatcher_label(kind),
            status=status_label(report.status), predictor=predictor_name(predictor_kind),
            sequence=state.sequence, queued=len(snapshot.queued), running=len(snapshot.running),
            started=len(response.starts), total_s=round(report.total_seconds, 4),
            snapshot_s=round(snapshot_seconds, 4),
            stages={k: round(v, 4) for k, v in result.stage_seconds.items()},
            fallback=result.fallback_reason or None,
        )
        return response


