"""DispatcherService: validate the snapshot, predict durations, decide, check, answer."""

from __future__ import annotations

import threading
import time
import traceback

import grpc
import structlog

from hpcdispatch import __version__
from hpcdispatch.decision_check import check_decision
from hpcdispatch.proto_convert import snapshot_from_pb
from hpcdispatch.server.catalog import PREDICTOR_BY_KIND, dispatcher_kind, predictor_kind
from hpcdispatch.server.config import ServerConfig
from hpcdispatch.server.dispatchers import DISPATCHERS
from hpcdispatch.server.dispatchers.base import Outcome, SearchControl, SearchSettings
from hpcdispatch.server.dispatchers.problem import NodeIndex, Problem, build_problem
from hpcdispatch.server.errors import abort_invalid_argument
from hpcdispatch.server.metrics import ServiceMetrics, dispatcher_label, status_label
from hpcdispatch.server.node_table import NodeTables
from hpcdispatch.server.predictors.base import Completion, DurationPredictor, JobFacts
from hpcdispatch.server.predictors.registry import PredictorRegistry
from hpcdispatch.server.profiles import DEFAULT_PROFILE, PROFILES, resolve_settings
from hpcdispatch.server.validation import Violation, check_sizes, validate_dispatch_request
from hpcdispatch.snapshot import Decision, JobStart, Snapshot
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc

log = structlog.get_logger("hpcdispatch.server")

# Time kept back from the caller's deadline for stopping the solver, checking and answering:
# a tenth of the time left, at least DEADLINE_MARGIN_SECONDS (50 ms was too little on a loaded
# 2-core machine: a 2.5 s deadline was exceeded while the decision was being finished).
DEADLINE_MARGIN_SECONDS = 0.2
DEADLINE_MARGIN_SHARE = 0.1


def predictor_name(kind: int) -> str:
    return PREDICTOR_BY_KIND.get(kind, str(kind))


def queued_facts(job: pb.QueuedJob) -> JobFacts:
    return JobFacts(
        user=job.user, name=job.name, queue=job.queue, units=job.units,
        unit_request=dict(job.unit_request), requested_time=job.requested_time,
        actual_duration=job.actual_duration if job.HasField("actual_duration") else None,
    )


def running_facts(job: pb.RunningJob) -> JobFacts:
    first = job.units[0].amounts if job.units else {}
    return JobFacts(
        user=job.user, name=job.name, queue="", units=len(job.units),
        unit_request=dict(first), requested_time=job.requested_time,
    )


def corrected_duration(predicted: int, start: int, requested: int, t: int) -> int:
    """d_i of a running job whose prediction may have been exceeded.

    A job still running past its predicted end is, from then on, expected to run to its
    requested time (Tsafrir, Etsion, Feitelson 2007 correct exceeded predictions upwards). Left
    at the papers' `max(1, s_i + d_i - t)`, every such job looks one second from ending at every
    decision, and the CP dispatchers keep planning around resources that do not free up.
    """
    if start + predicted > t:
        return predicted
    return max(predicted, requested)


def decision_of(problem: Problem, outcome: Outcome) -> Decision:
    return Decision(
        time=problem.t,
        starts=[
            JobStart(
                problem.jobs[i].id,
                tuple(problem.node_ids[n] for n in nodes),
                problem.jobs[i].duration,
            )
            for i, nodes in sorted(outcome.starts.items())
        ],
    )


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
        self.decision_slots = max(1, config.workers - 1)
        self._decision_slots = threading.BoundedSemaphore(self.decision_slots)
        if config.default_profile not in PROFILES:
            raise ValueError(f"unknown default profile {config.default_profile!r}")

    # -- Dispatch ------------------------------------------------------------------------------

    def Dispatch(
        self, request: pb.DispatchRequest, context: grpc.ServicerContext
    ) -> pb.DispatchResponse:
        # Decisions may hold all worker threads but one, which stays for health checks,
        # DescribeService and completion reports: a liveness probe must not wait behind a
        # queue of slow decisions. One more decision is refused at once (clients retry it).
        if not self._decision_slots.acquire(blocking=False):
            log.warning("decision refused: all decision slots busy", slots=self.decision_slots)
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"{self.decision_slots} decisions in progress, the server's limit "
                          "(workers - 1); retry with backoff")
        if self.metrics is not None:
            self.metrics.decisions_in_progress.inc()
        try:
            return self._dispatch(request, context)
        finally:
            self._decision_slots.release()
            if self.metrics is not None:
                self.metrics.decisions_in_progress.dec()

    def _dispatch(
        self, request: pb.DispatchRequest, context: grpc.ServicerContext
    ) -> pb.DispatchResponse:
        received = time.monotonic()
        left = context.time_remaining()  # the caller's deadline, read on arrival
        budget = self.config.max_decision_seconds if left is None else min(
            left - max(DEADLINE_MARGIN_SECONDS, DEADLINE_MARGIN_SHARE * left),
            self.config.max_decision_seconds,
        )
        structlog.contextvars.bind_contextvars(
            snapshot_time=request.time, cluster=request.cluster or "default"
        )
        violations = check_sizes(request, self.config)
        table = None
        if not violations:  # a snapshot beyond the size limits is not inspected further
            table = self.node_tables.get(request)
            violations = validate_dispatch_request(
                request, self.config, self.predictors.kinds(), table.check
            )
        if violations:
            log.warning("invalid snapshot", time=request.time, violations=len(violations),
                        first=violations[0].field)
            abort_invalid_argument(context, f"invalid snapshot: {len(violations)} problem(s), "
                                   f"first: {violations[0].field}: {violations[0].description}",
                                   violations)
        kind = request.dispatcher or self.default_dispatcher
        predictor_kind_ = request.predictor or self.default_predictor
        settings = resolve_settings(request.search, self.config.default_profile)
        assert table is not None and table.nodes is not None and table.index is not None
        snapshot = snapshot_from_pb(request, table.nodes)
        predictor = self.predictors.predictor(request.cluster or "default", predictor_kind_)
        problem = self._problem(request, snapshot, predictor, table.index)

        control = SearchControl(
            settings=settings,
            deadline=received + max(budget, 0.0),
            first_fit=request.allocator == pb.ALLOCATOR_FIRST_FIT,
            workers=self.config.solver_workers,
        )
        outcome, decision, fallback_reason = self._decide(kind, problem, snapshot, control)
        response = pb.DispatchResponse(time=request.time)
        queued = {j.id: j for j in request.queued_jobs}
        for start in decision.starts:
            amounts = dict(queued[start.job_id].unit_request)
            response.starts.add(
                job_id=start.job_id,
                expected_duration=start.expected_duration,
                units=[pb.UnitPlacement(node_id=n, amounts=amounts) for n in start.nodes],
            )
        self._report(response.report, kind, predictor_kind_, settings, problem, outcome)
        response.report.fallback_reason = fallback_reason
        response.report.total_seconds = time.monotonic() - received
        report = response.report
        if self.metrics is not None:
            self.metrics.observe_decision(
                report, len(request.queued_jobs), len(request.running_jobs), len(response.starts)
            )
            self.metrics.remember_predictions(
                request.cluster or "default", predictor_kind_,
                ((s.job_id, s.expected_duration) for s in response.starts),
            )
        log.info(
            "decision", dispatcher=dispatcher_label(kind), status=status_label(report.status),
            predictor=predictor_name(predictor_kind_), profile=settings.profile,
            queued=len(request.queued_jobs), running=len(request.running_jobs),
            considered=len(report.considered_job_ids), started=len(response.starts),
            attempts=len(outcome.attempts), variables=report.model_variables,
            constraints=report.model_constraints,
            build_s=round(outcome.build_seconds, 4), solve_s=round(outcome.solve_seconds, 4),
            total_s=round(report.total_seconds, 4), fallback=fallback_reason or None,
        )
        return response

    def _problem(
        self, request: pb.DispatchRequest, snapshot: Snapshot, predictor: DurationPredictor,
        nodes: NodeIndex,
    ) -> Problem:
        queued = {j.id: predictor.predict(queued_facts(j)) for j in request.queued_jobs}
        running = {
            j.id: corrected_duration(
                j.expected_duration if j.HasField("expected_duration")
                else predictor.predict(running_facts(j)),
                j.start_time, j.requested_time, request.time,
            )
            for j in request.running_jobs
        }
        return build_problem(snapshot, queued, running, nodes)

    def _decide(
        self, kind: int, problem: Problem, snapshot: Snapshot, control: SearchControl
    ) -> tuple[Outcome, Decision, str]:
        """Run the dispatcher; on an error or a decision that fails the check, fall back."""
        reason = ""
        try:
            outcome = DISPATCHERS[kind].decide(problem, control)
        except Exception as exc:  # a dispatcher bug must not cost the caller a decision
            log.error("dispatcher failed", dispatcher=kind, error=repr(exc),
                      trace=traceback.format_exc())
            outcome, reason = None, f"dispatcher error: {exc!r}"
            self._count_fallback(kind, "dispatcher_error")
        if outcome is not None:
            decision = decision_of(problem, outcome)
            problems = check_decision(snapshot, decision)
            if not problems:
                return outcome, decision, reason
            log.error("decision failed the independent check", dispatcher=kind,
                      problems=problems[:10])
            reason = f"decision failed the check: {problems[0]}"
            self._count_check_failure(kind)
            self._count_fallback(kind, "check_failed")
        fallback = DISPATCHERS[pb.DISPATCHER_EASY].decide(problem, control)
        fallback.status = pb.SOLVE_STATUS_FALLBACK
        decision = decision_of(problem, fallback)
        if check_decision(snapshot, decision):
            log.critical("fallback decision failed the check; starting nothing")
            self._count_check_failure(pb.DISPATCHER_EASY)
            fallback.starts = {}
            decision = Decision(problem.t)
        return fallback, decision, reason

    def _count_fallback(self, kind: int, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.count_fallback(kind, reason)

    def _count_check_failure(self, kind: int) -> None:
        if self.metrics is not None:
            self.metrics.count_check_failure(kind)

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
        violations = []
        for i, c in enumerate(request.completions):
            if not c.job_id:
                violations.append(Violation(f"completions[{i}].job_id", "must not be empty"))
            if c.end_time < c.start_time:
                violations.append(Violation(f"completions[{i}].end_time",
                                            "must be >= start_time"))
            if c.requested_time <= 0:
                violations.append(Violation(f"completions[{i}].requested_time",
                                            "must be > 0 seconds"))
        if violations:
            abort_invalid_argument(context, "invalid completions", violations[:100])
        cluster = request.cluster or "default"
        if self.metrics is not None:
            self.metrics.observe_completions(
                cluster, ((c.job_id, c.start_time, c.end_time) for c in request.completions)
            )
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
                    protect_head=s.protect_head,
                )
                for s, text in PROFILES.values()
            ],
            dispatchers=[pb.Dispatcher.ValueType(k) for k in sorted(DISPATCHERS)],
            predictors=[pb.Predictor.ValueType(k) for k in self.predictors.kinds()],
            max_nodes=self.config.max_nodes,
            max_jobs=self.config.max_jobs,
        )
