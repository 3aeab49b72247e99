"""DispatcherService: take the snapshot in, decide through the decision front, answer; take in
completion reports; describe the service."""

from __future__ import annotations

import time

import grpc
import structlog

from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc

from ..domain.caller_scope import CallerScope
from ..intake.decision_options import asked_dispatcher
from ..intake.interruption import Interruption
from ..intake.shown import clipped
from ..intake.snapshot_intake import SnapshotIntake
from ..intake.validation import validate_completions
from ..pipeline import CompletionsNotStored, learn_completions
from .decision_front import DecisionFront, DecisionSlot, Situation, predictor_name
from .errors import abort_invalid_argument
from .metrics import dispatcher_label, status_label
from .offered import describe
from .tls import caller_identity

log = structlog.get_logger("hpcdispatch.server")


class DispatcherService(pb_grpc.DispatcherServiceServicer):
    def __init__(self, front: DecisionFront, intake: SnapshotIntake) -> None:
        self.front = front
        self.intake = intake
        self.config = front.config
        self.predictors = front.predictors
        self.metrics = front.metrics

    # -- Dispatch ------------------------------------------------------------------------------

    def Dispatch(
        self, request: pb.DispatchRequest, context: grpc.ServicerContext
    ) -> pb.DispatchResponse:
        received = time.monotonic()
        # The kind asked for (the intake refuses a name it does not know; 0 meanwhile).
        with self.front.slot(asked_dispatcher(request).kind, context, received,
                             request.search.profile) as slot:
            return self._dispatch(request, context, received, slot)
        raise AssertionError("the decision slot aborts or yields")  # pragma: no cover

    def _dispatch(
        self, request: pb.DispatchRequest, context: grpc.ServicerContext, received: float,
        slot: DecisionSlot,
    ) -> pb.DispatchResponse:
        structlog.contextvars.bind_contextvars(
            snapshot_time=request.time,
            cluster=clipped(request.cluster or "default", self.config.max_id_chars),
        )
        # The intake stops between chunks once the slot's time is up or its caller gone.
        intake = self.intake.dispatch(request, Interruption(slot.deadline, slot.cancelled))
        violations = intake.violations
        if violations:
            log.warning("invalid snapshot", time=request.time, violations=len(violations),
                        first=violations[0].field)
            abort_invalid_argument(context, f"invalid request: {len(violations)} problem(s), "
                                   f"first: {violations[0].field}: {violations[0].description}",
                                   violations)
        assert intake.snapshot is not None and intake.nodes is not None
        assert intake.options is not None
        snapshot = self.front.promises.verified_snapshot(  # only the promises it signed
            intake.snapshot, CallerScope(slot.identity, intake.options.cluster),
            Interruption(slot.deadline, slot.cancelled))
        decided = self.front.decide(Situation(snapshot, intake.nodes), intake.options,
                                    slot, received)
        response, result, settings = decided.response, decided.result, decided.settings
        outcome, report = result.outcome, response.report
        log.info(
            "decision", dispatcher=dispatcher_label(slot.kind),
            status=status_label(report.status), predictor=predictor_name(decided.predictor),
            profile=settings.profile, queued=len(request.queued_jobs),
            running=len(request.running_jobs), considered=len(report.considered_job_ids),
            started=len(response.starts), attempts=len(outcome.attempts),
            variables=report.model_variables, constraints=report.model_constraints,
            build_s=round(outcome.build_seconds, 4), solve_s=round(outcome.solve_seconds, 4),
            total_s=round(report.total_seconds, 4), fallback=result.fallback_reason or None,
            stages={k: round(v, 4) for k, v in result.stage_seconds.items()},
        )
        return response

    # -- Completions and description --------------------------------------------------------

    def ReportCompletions(
        self, request: pb.ReportCompletionsRequest, context: grpc.ServicerContext
    ) -> pb.ReportCompletionsResponse:
        # All or nothing: one invalid completion rejects the whole report, nothing is stored.
        violations = validate_completions(request, self.config)
        if violations:
            log.warning("invalid completions", completions=len(request.completions),
                        violations=len(violations), first=violations[0].field)
            abort_invalid_argument(
                context, f"invalid completions: {len(violations)} problem(s), first: "
                f"{violations[0].field}: {violations[0].description}; none stored", violations)
        cluster = request.cluster or "default"
        try:
            accepted = learn_completions(self.predictors, cluster, request.completions,
                                         caller_identity(context))
        except CompletionsNotStored as exc:
            # Not acknowledged: the client retries UNAVAILABLE, and storing is idempotent.
            log.error("completions not stored: knowledge base unreachable", cluster=cluster,
                      completions=len(request.completions), error=str(exc))
            context.abort(grpc.StatusCode.UNAVAILABLE,
                          f"the predictors' knowledge base is unreachable, none of the "
                          f"{len(request.completions)} completions stored; retry")
        # Once stored, so a retried report is not counted twice.
        self.metrics.observe_completions(
            cluster, ((c.job_id, c.start_time, c.end_time) for c in request.completions)
        )
        return pb.ReportCompletionsResponse(accepted=accepted)

    def DescribeService(
        self, request: pb.DescribeServiceRequest, context: grpc.ServicerContext
    ) -> pb.DescribeServiceResponse:
        return describe(self.front)
