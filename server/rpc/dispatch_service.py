"""DispatcherService: validate the snapshot, predict durations, decide, check, answer."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import grpc
import structlog

from hpcdispatch import __version__
from hpcdispatch.catalog import PREDICTOR_BY_KIND, dispatcher_kind, predictor_kind
from hpcdispatch.proto_convert import add_starts
from hpcdispatch.snapshot import Snapshot
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc

from ..config import ServerConfig
from ..intake.node_table import NodeTables
from ..intake.running_job_cache import RunningJobCache
from ..intake.snapshot_intake import take_in
from ..intake.validation import check_sizes, validate_completions
from ..pipeline import (
    DEFAULT_PROFILE,
    DISPATCHERS,
    PROFILES,
    Completion,
    DecisionAbandoned,
    DecisionResult,
    JobFacts,
    Outcome,
    PredictorRegistry,
    Problem,
    SearchControl,
    SearchSettings,
    StoreUnavailable,
    resolve_settings,
    run_decision,
)
from .admission import DecisionAdmission, Refused
from .errors import abort_invalid_argument
from .metrics import ServiceMetrics, dispatcher_label, status_label

log = structlog.get_logger("hpcdispatch.server")

# Time kept back from the caller's deadline for stopping the solver, checking and answering:
# a tenth of the time left, at least DEADLINE_MARGIN_SECONDS (50 ms was too little on a loaded
# 2-core machine: a 2.5 s deadline was exceeded while the decision was being finished).
DEADLINE_MARGIN_SECONDS = 0.2
DEADLINE_MARGIN_SHARE = 0.1


def predictor_name(kind: int) -> str:
    return PREDICTOR_BY_KIND.get(kind, str(kind))


def cpu_count() -> int:
    """CPUs this process may run on (its affinity, which containers and taskset restrict)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def deadline_margin(left: float) -> float:
    """Seconds kept back from a caller's `left` seconds: a tenth, at least
    DEADLINE_MARGIN_SECONDS, but never more than half, so that a short deadline (a small
    cluster's plugin may give 100 ms) still leaves the decision some time."""
    return min(max(DEADLINE_MARGIN_SECONDS, DEADLINE_MARGIN_SHARE * left), 0.5 * max(left, 0.0))


@dataclass(frozen=True, slots=True)
class DecisionSlot:
    """The deadline and the cancellation of one admitted decision."""

    kind: int  # the dispatcher asked for (the server's default when unset)
    deadline: float  # time.monotonic() by which the decision must be ready
    cancelled: Callable[[], bool]  # the caller has gone

    @staticmethod
    def of(kind: int, context: grpc.ServicerContext, received: float,
           max_seconds: float) -> DecisionSlot:
        """Keep back from the caller's deadline (read on arrival) the time to stop the
        solver, check and answer; `max_seconds` when the caller sets no deadline."""
        left = context.time_remaining()
        budget = max_seconds if left is None else min(left - deadline_margin(left), max_seconds)
        return DecisionSlot(kind, received + max(budget, 0.0), lambda: not context.is_active())


class DispatcherService(pb_grpc.DispatcherServiceServicer):
    def __init__(
        self, config: ServerConfig, predictors: PredictorRegistry,
        metrics: ServiceMetrics | None = None,
    ) -> None:
        self.config = config
        self.predictors = predictors
        self.metrics = metrics
        self.default_dispatcher = dispatcher_kind(config.default_dispatcher)
        self.default_predictor = predictor_kind(config.default_predictor)
        self.node_tables = NodeTables()
        self.running_jobs = RunningJobCache()  # each cluster's last running jobs, checked
        # Decisions may hold all worker threads but one, which stays for health checks,
        # DescribeService and completion reports; of those, `decision_concurrency` compute at
        # once and the others wait in the admission queue while their deadline allows.
        self.decision_threads = max(1, config.workers - 1)
        self._decision_threads = threading.BoundedSemaphore(self.decision_threads)
        self.admission = DecisionAdmission(
            min(config.decision_concurrency or cpu_count(), self.decision_threads)
        )
        if metrics is not None:
            metrics.decisions_waiting.set_function(lambda: self.admission.waiting)
        if config.default_profile not in PROFILES:
            raise ValueError(f"unknown default profile {config.default_profile!r}")

    # -- Dispatch ------------------------------------------------------------------------------

    def Dispatch(
        self, request: pb.DispatchRequest, context: grpc.ServicerContext
    ) -> pb.DispatchResponse:
        received = time.monotonic()
        with self.decision_slot(request.dispatcher, context, received) as slot:
            return self._dispatch(request, context, received, slot)
        raise AssertionError("decision_slot aborts or yields")  # pragma: no cover

    @contextmanager
    def decision_slot(
        self, dispatcher: int, context: grpc.ServicerContext, received: float
    ) -> Iterator[DecisionSlot]:
        """A decision thread and an admission slot for one decision (Dispatch and the session
        service alike); aborts the call with RESOURCE_EXHAUSTED when refused, CANCELLED or
        DEADLINE_EXCEEDED when the decision is abandoned."""
        # A liveness probe must not wait behind a queue of decisions: beyond workers - 1
        # threads, a decision is refused at once (clients retry it with backoff).
        if not self._decision_threads.acquire(blocking=False):
            log.warning("decision refused: all decision threads busy",
                        threads=self.decision_threads)
            self._count_refusal("threads")
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"{self.decision_threads} decisions in progress or waiting, the "
                          "server's limit (workers - 1); retry with backoff")
        try:
            slot = DecisionSlot.of(dispatcher or self.default_dispatcher, context, received,
                                   self.config.max_decision_seconds)
            try:
                admitted = self.admission.enter(slot.kind, slot.deadline, slot.cancelled)
            except Refused as refused:
                self._count_refusal("cancelled" if refused.cancelled else "deadline")
                log.warning("decision refused", reason=str(refused), dispatcher=slot.kind,
                            waiting=self.admission.waiting)
                context.abort(grpc.StatusCode.CANCELLED if refused.cancelled
                              else grpc.StatusCode.RESOURCE_EXHAUSTED, str(refused))
            if self.metrics is not None:
                self.metrics.decisions_in_progress.inc()
            finished = False
            try:
                yield slot
                finished = True
            except DecisionAbandoned as abandoned:
                if self.metrics is not None:
                    self.metrics.count_abandoned(abandoned.stage)
                log.warning("decision abandoned", stage=abandoned.stage,
                            cancelled=abandoned.cancelled)
                context.abort(grpc.StatusCode.CANCELLED if abandoned.cancelled
                              else grpc.StatusCode.DEADLINE_EXCEEDED, str(abandoned))
            finally:
                self.admission.leave(admitted, measure=finished)
                if self.metrics is not None:
                    self.metrics.decisions_in_progress.dec()
        finally:
            self._decision_threads.release()

    def _dispatch(
        self, request: pb.DispatchRequest, context: grpc.ServicerContext, received: float,
        slot: DecisionSlot,
    ) -> pb.DispatchResponse:
        structlog.contextvars.bind_contextvars(
            snapshot_time=request.time, cluster=request.cluster or "default"
        )
        violations = check_sizes(request, self.config)
        table, snapshot = None, None
        if not violations:  # a snapshot beyond the size limits is not inspected further
            table = self.node_tables.get(request)
            intake = take_in(request, self.config, self.predictors.kinds(), table,
                             self.running_jobs)
            snapshot, violations = intake.snapshot, intake.violations
        if violations:
            log.warning("invalid snapshot", time=request.time, violations=len(violations),
                        first=violations[0].field)
            abort_invalid_argument(context, f"invalid snapshot: {len(violations)} problem(s), "
                                   f"first: {violations[0].field}: {violations[0].description}",
                                   violations)
        assert table is not None and table.index is not None and snapshot is not None
        kind, predictor_kind_ = slot.kind, request.predictor or self.default_predictor
        control = self.search_control(request, slot)
        if control.should_stop():
            raise DecisionAbandoned("convert", cancelled=slot.cancelled())
        cluster = request.cluster or "default"
        predictor = self.predictors.predictor(cluster, predictor_kind_)
        result = run_decision(snapshot, kind, predictor, control, table.index)
        response = self.answer(snapshot, result, kind, predictor_kind_, control.settings, cluster,
                               received)
        outcome, report, settings = result.outcome, response.report, control.settings
        log.info(
            "decision", dispatcher=dispatcher_label(kind), status=status_label(report.status),
            predictor=predictor_name(predictor_kind_), profile=settings.profile,
            queued=len(request.queued_jobs), running=len(request.running_jobs),
            considered=len(report.considered_job_ids), started=len(response.starts),
            attempts=len(outcome.attempts), variables=report.model_variables,
            constraints=report.model_constraints,
            build_s=round(outcome.build_seconds, 4), solve_s=round(outcome.solve_seconds, 4),
            total_s=round(report.total_seconds, 4), fallback=result.fallback_reason or None,
            stages={k: round(v, 4) for k, v in result.stage_seconds.items()},
        )
        return response

    def search_control(self, options: pb.DispatchRequest, slot: DecisionSlot) -> SearchControl:
        """The search settings, allocator and solver workers a request asks for, under the
        slot's deadline and cancellation (Dispatch and session decisions alike)."""
        return SearchControl(
            settings=resolve_settings(options.search, self.config.default_profile),
            deadline=slot.deadline,
            first_fit=options.allocator == pb.ALLOCATOR_FIRST_FIT,
            workers=self.config.solver_workers,
            cancelled=slot.cancelled,
        )

    def answer(
        self, snapshot: Snapshot, result: DecisionResult, kind: int, predictor_kind: int,
        settings: SearchSettings, cluster: str, received: float,
    ) -> pb.DispatchResponse:
        """The wire answer of a checked decision, counted in the metrics."""
        self._count_fallback_of(kind, result)
        response = pb.DispatchResponse(time=snapshot.time)
        starts = result.decision.starts
        add_starts(response, starts, {q.id: q.unit_request for q in snapshot.queued})
        report = response.report
        self._report(report, kind, predictor_kind, settings, result.problem, result.outcome)
        report.fallback_reason = result.fallback_reason
        report.total_seconds = time.monotonic() - received
        if self.metrics is not None:
            self.metrics.observe_decision(
                report, len(snapshot.queued), len(snapshot.running), len(response.starts)
            )
            self.metrics.remember_predictions(
                cluster, predictor_kind, ((s.job_id, s.expected_duration) for s in starts))
        return response

    def _count_fallback_of(self, kind: int, result: DecisionResult) -> None:
        if self.metrics is None:
            return
        for failed in result.check_failures:
            self.metrics.count_check_failure(failed)
        if result.fallback_code:
            self.metrics.count_fallback(kind, result.fallback_code)

    def _count_refusal(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.count_refused(reason)

    @staticmethod
    def _report(
        report: pb.DecisionReport, kind: int, predictor: int, settings: SearchSettings,
        problem: Problem, outcome: Outcome,
    ) -> None:
        report.dispatcher = pb.Dispatcher.ValueType(kind)
        report.predictor = pb.Predictor.ValueType(predictor)
        report.profile = settings.profile
        report.status = pb.SolveStatus.ValueType(outcome.status)
        report.model_variables = outcome.variables
        report.model_constraints = outcome.constraints
        report.build_seconds = outcome.build_seconds
        report.solve_seconds = outcome.solve_seconds
        for a in outcome.attempts:
            attempt = report.attempts.add(
                time_limit_ms=a.time_limit_ms, status=a.status, wall_seconds=a.wall_seconds
            )
            if a.objective is not None:
                attempt.objective = a.objective
        if outcome.objective is not None:
            report.objective = outcome.objective
        report.considered_job_ids.extend(problem.jobs[i].id for i in outcome.considered)
        for i, reason in outcome.skipped:
            report.skipped_jobs.add(job_id=problem.jobs[i].id, reason=reason)

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
            accepted = self.predictors.learn(
                cluster,
                (
                    Completion(
                        job_id=c.job_id,
                        facts=JobFacts(
                            user=c.user, name=c.name, queue=c.queue, units=c.units,
                            unit_request=dict(c.unit_request), requested_time=c.requested_time,
                        ),
                        start_time=c.start_time,
                        end_time=c.end_time,
                    )
                    for c in request.completions
                ),
            )
        except StoreUnavailable as exc:
            # Not acknowledged: the client retries UNAVAILABLE, and storing is idempotent.
            log.error("completions not stored: knowledge base unreachable", cluster=cluster,
                      completions=len(request.completions), error=str(exc))
            context.abort(grpc.StatusCode.UNAVAILABLE,
                          f"the predictors' knowledge base is unreachable, none of the "
                          f"{len(request.completions)} completions stored; retry")
        if self.metrics is not None:  # once stored, so a retried report is not counted twice
            self.metrics.observe_completions(
                cluster, ((c.job_id, c.start_time, c.end_time) for c in request.completions)
            )
        return pb.ReportCompletionsResponse(accepted=accepted)

    def DescribeService(
        self, request: pb.DescribeServiceRequest, context: grpc.ServicerContext
    ) -> pb.DescribeServiceResponse:
        return pb.DescribeServiceResponse(
            version=__version__,
            default_dispatcher=pb.Dispatcher.ValueType(self.default_dispatcher),
            default_predictor=pb.Predictor.ValueType(self.default_predictor),
            default_profile=self.config.default_profile or DEFAULT_PROFILE,
            profiles=[
                pb.SearchProfile(
                    name=s.profile, delta_ms=s.delta_ms, delta_max_ms=s.delta_max_ms, k=s.k,
                    window=s.window, description=text, stall_ms=s.stall_ms,
                    protect_head=s.protect_head, starvation_wait_s=s.starvation_wait_s,
                    more_orders=s.more_orders, work_conserving=s.work_conserving,
                )
                for s, text in PROFILES.values()
            ],
            dispatchers=[pb.Dispatcher.ValueType(k) for k in sorted(DISPATCHERS)],
            predictors=[pb.Predictor.ValueType(k) for k in self.predictors.kinds()],
            max_nodes=self.config.max_nodes,
            max_jobs=self.config.max_jobs,
        )
