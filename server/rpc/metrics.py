"""Prometheus metrics: conventional gRPC server metrics and the dispatcher's own.

Each server owns a CollectorRegistry (several servers can run in one process, as in tests) and
serves it on an HTTP port of its own. Names follow Prometheus conventions: the app prefix
`hpcdispatch_`, base units, counters ending in `_total`, no job ids as labels.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import WSGIServer

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from hpcdispatch import __version__
from hpcdispatch.catalog import dispatcher_name, predictor_name
from hpcdispatch.v1 import dispatcher_pb2 as pb

from .metrics_http import BasicAuth, MetricsTls, start_metrics_http
from .rpc_wrap import Around, AroundInterceptor, split_method

__all__ = ["SECONDS_BUCKETS", "MetricsInterceptor", "ServiceMetrics", "status_label"]

# Decision and RPC latency: 1 ms .. 60 s (the client library's defaults stop at 10 s).
SECONDS_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0,
)
ATTEMPT_BUCKETS = (0, 1, 2, 3, 4, 5, 6, 8, 10, 16, 32)
MODEL_SIZE_BUCKETS = (10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000)
# Predictor error, seconds: 1 s .. 2 days.
ERROR_BUCKETS = (1, 10, 60, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400, 172800)
# How much later a promise moved, seconds: 1 min .. 2 weeks.
PROMISE_BUCKETS = (60, 300, 900, 1800, 3600, 7200, 14400, 28800, 43200, 86400, 172800, 345600,
                   604800, 1209600)
# Started jobs whose predicted duration is kept until their completion is reported.
DEFAULT_PREDICTION_MEMORY = 100_000

# Go's names of status codes (as the conventional grpc_code label has them).
_GO_CODE_NAMES = {grpc.StatusCode.OK: "OK", grpc.StatusCode.CANCELLED: "Canceled"}


def code_label(code: grpc.StatusCode) -> str:
    """grpc.StatusCode.INVALID_ARGUMENT -> "InvalidArgument"."""
    return _GO_CODE_NAMES.get(code) or "".join(w.capitalize() for w in code.name.split("_"))


def status_label(status: int) -> str:
    """pb.SOLVE_STATUS_OPTIMAL -> "optimal"."""
    name = pb.SolveStatus.Name(pb.SolveStatus.ValueType(status))
    return name.removeprefix("SOLVE_STATUS_").lower()


def dispatcher_label(kind: int) -> str:
    """The registered name of a dispatcher kind (a built-in's or a plugin's): label values are
    the names installed, never a caller's text."""
    return dispatcher_name(kind) or "unknown"


def predictor_label(kind: int) -> str:
    return predictor_name(kind) or "unknown"


@dataclass(frozen=True, slots=True)
class _DecisionSeries:
    """The labelled series one dispatcher's decisions are counted in (`observe_decision`)."""

    build_seconds: Histogram
    solve_seconds: Histogram
    decision_seconds: Histogram
    attempts: Histogram
    model_variables: Histogram
    model_constraints: Histogram
    jobs_considered: Counter
    jobs_started: Counter


class ServiceMetrics:
    """All metrics of one server, in its own registry."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        prediction_memory: int = DEFAULT_PREDICTION_MEMORY,
    ) -> None:
        self.registry = CollectorRegistry() if registry is None else registry
        self._rpc_metrics(self.registry)
        self._decision_metrics(self.registry)
        self._admission_metrics(self.registry)
        self._predictor_metrics(self.registry)
        self._session_metrics(self.registry)
        self._promise_metrics(self.registry)
        self._memory = prediction_memory
        self._predictions: OrderedDict[tuple[str, str], tuple[str, int]] = OrderedDict()
        self._lock = threading.Lock()
        # Each decision's series of one dispatcher, as `labels` gives them (the same objects).
        self._decision_series: dict[str, _DecisionSeries] = {}
        self._decisions_by_status: dict[tuple[str, int], Counter] = {}
        self._http: WSGIServer | None = None
        self._http_thread: threading.Thread | None = None

    def _rpc_metrics(self, r: CollectorRegistry) -> None:
        """The conventional gRPC server metrics (go-grpc-prometheus's names) and the build."""
        rpc = ("grpc_service", "grpc_method", "grpc_type")
        self.rpc_started = Counter(
            "grpc_server_started_total", "RPCs started on the server.", rpc, registry=r)
        self.rpc_handled = Counter(
            "grpc_server_handled_total", "RPCs completed on the server, whatever their status.",
            (*rpc, "grpc_code"), registry=r)
        self.rpc_seconds = Histogram(
            "grpc_server_handling_seconds", "Time to handle an RPC until it completes.",
            rpc, buckets=SECONDS_BUCKETS, registry=r)
        self.build_info = Gauge(
            "hpcdispatch_build_info", "Version of the running server (value 1).", ("version",),
            registry=r)
        self.build_info.labels(__version__).set(1)

    def _decision_metrics(self, r: CollectorRegistry) -> None:
        """Each decision: its time by stage, its attempts, its model's size, its jobs."""
        d = ("dispatcher",)
        self.build_seconds = Histogram(
            "hpcdispatch_decision_build_seconds", "Time to build the decision's model.", d,
            buckets=SECONDS_BUCKETS, registry=r)
        self.solve_seconds = Histogram(
            "hpcdispatch_decision_solve_seconds", "Time spent searching (all attempts).", d,
            buckets=SECONDS_BUCKETS, registry=r)
        self.decision_seconds = Histogram(
            "hpcdispatch_decision_seconds",
            "Time from request to answer of a decision (validation, prediction, model, search, "
            "check).", d, buckets=SECONDS_BUCKETS, registry=r)
        self.attempts = Histogram(
            "hpcdispatch_decision_attempts", "Solver attempts per decision.", d,
            buckets=ATTEMPT_BUCKETS, registry=r)
        self.decisions = Counter(
            "hpcdispatch_decisions_total", "Decisions answered, by final solver status.",
            (*d, "status"), registry=r)
        self.model_variables = Histogram(
            "hpcdispatch_model_variables", "Variables of the decision's model.", d,
            buckets=MODEL_SIZE_BUCKETS, registry=r)
        self.model_constraints = Histogram(
            "hpcdispatch_model_constraints", "Constraints of the decision's model.", d,
            buckets=MODEL_SIZE_BUCKETS, registry=r)
        self.jobs_considered = Counter(
            "hpcdispatch_jobs_considered_total", "Queued jobs that entered a decision's model.",
            d, registry=r)
        self.jobs_started = Counter(
            "hpcdispatch_jobs_started_total", "Jobs a decision started.", d, registry=r)
        self.queue_depth = Gauge(
            "hpcdispatch_queue_depth", "Queued jobs in the latest snapshot.", registry=r)
        self.running_jobs = Gauge(
            "hpcdispatch_running_jobs", "Running jobs in the latest snapshot.", registry=r)

    def _admission_metrics(self, r: CollectorRegistry) -> None:
        """Admission control, abandoned decisions, fallbacks and failed checks."""
        d = ("dispatcher",)
        self.decisions_in_progress = Gauge(
            "hpcdispatch_decisions_in_progress",
            "Decisions being computed now (at most decision_concurrency).", registry=r)
        self.decisions_waiting = Gauge(
            "hpcdispatch_decisions_waiting",
            "Decisions waiting for a slot in the admission queue.", registry=r)
        self.decisions_refused = Counter(
            "hpcdispatch_decisions_refused_total",
            "Decisions refused by admission control (reason: deadline = could not be ready "
            "before the caller's deadline, threads = all decision threads busy, share = the "
            "caller's identity holds its share of them, cancelled = the caller left while "
            "waiting).", ("reason",), registry=r)
        self.decisions_abandoned = Counter(
            "hpcdispatch_decisions_abandoned_total",
            "Admitted decisions given up part-way because the caller left or the deadline "
            "passed, by the stage they had reached.", ("stage",), registry=r)
        self.fallbacks = Counter(
            "hpcdispatch_fallback_decisions_total",
            "Decisions answered by the checked-safe fallback instead of the dispatcher asked "
            "for.", (*d, "reason"), registry=r)
        self.check_failures = Counter(
            "hpcdispatch_decision_check_failures_total",
            "Decisions that failed the independent check (the fallback's included).", d,
            registry=r)

    def _predictor_metrics(self, r: CollectorRegistry) -> None:
        """The predictors: their error, failures, plugins and knowledge base."""
        self.predictor_error = Histogram(
            "hpcdispatch_predictor_absolute_error_seconds",
            "Absolute difference between a started job's predicted and actual duration.",
            ("predictor",), buckets=ERROR_BUCKETS, registry=r)
        self.predictor_failures = Counter(
            "hpcdispatch_predictor_failures_total",
            "Prediction batches a plugin's predictor failed, answered with the requested times "
            "(reason: load_failed = its code could not be loaded, raised, invalid = not one "
            "positive duration per job).", ("predictor", "reason"), registry=r)
        self.plugins_loaded = Gauge(
            "hpcdispatch_plugin_loaded",
            "Dispatchers and predictors registered by other packages than hpcdispatch (plugins), "
            "by group (dispatcher, predictor) and registered name (plugin): 1 loaded, 0 its "
            "code failed to load (a request naming it gets the fallback; DescribeService lists "
            "it as unavailable).", ("group", "plugin"), registry=r)
        self.predictions_pending = Gauge(
            "hpcdispatch_predictions_pending",
            "Started jobs whose prediction waits for their completion report.", registry=r)
        self.predictor_store_fallbacks = Counter(
            "hpcdispatch_predictor_store_fallbacks_total",
            "Prediction batches made without reading the predictors' knowledge base, which was "
            "unavailable (from the history read before; the requested time where none).",
            ("cluster",), registry=r)
        self.predictions_evicted = Counter(
            "hpcdispatch_predictions_evicted_total",
            "Predictions dropped unmatched because the bounded memory was full.", registry=r)

    def _session_metrics(self, r: CollectorRegistry) -> None:
        """Sessions and session streams."""
        d = ("dispatcher",)
        self.sessions_open = Gauge(
            "hpcdispatch_sessions_open", "Sessions held in memory (SessionService).", registry=r)
        self.session_failures = Counter(
            "hpcdispatch_session_failures_total",
            "Session calls answered FAILED_PRECONDITION, each a resync for the caller (reason: "
            "a SessionFailure name in lower case, e.g. sequence_gap).", ("reason",), registry=r)
        self.sessions_forgotten = Counter(
            "hpcdispatch_sessions_forgotten_total",
            "Sessions dropped by the server (why: expired = idle too long, evicted = beyond "
            "max_sessions, failed = after an internal error on its state).", ("why",),
            registry=r)
        self.session_busy = Counter(
            "hpcdispatch_session_busy_total",
            "Session calls answered ABORTED (SESSION_BUSY) at once because another call held "
            "their session.", registry=r)
        self.session_resends = Counter(
            "hpcdispatch_session_resends_total",
            "Resends of a session's latest delta, not applied again (answer: kept = the "
            "answer given before, decided = a decision on the state it made, its first call "
            "having ended in an error).", ("answer",), registry=r)
        self.session_streams_open = Gauge(
            "hpcdispatch_session_streams_open",
            "Session streams (StreamSession) open now (one waiting for its next message holds no "
            "thread).", registry=r)
        self.session_streams_idle_ended = Counter(
            "hpcdispatch_session_streams_idle_ended_total",
            "Session streams the server ended UNAVAILABLE because no message came for "
            "stream_idle_seconds.", registry=r)
        self.session_stream_messages = Counter(
            "hpcdispatch_session_stream_messages_total",
            "Messages answered on session streams, by call (open, update, close, "
            "report_completions) and the code of the answer (OK, or the message's error; the "
            "stream went on either way).", ("call", "grpc_code"), registry=r)
        self.session_decision_seconds = Histogram(
            "hpcdispatch_session_decision_seconds",
            "Time from request to answer of a session call that decides (delta, decision).",
            d, buckets=SECONDS_BUCKETS, registry=r)

    def _promise_metrics(self, r: CollectorRegistry) -> None:
        """The promise book's promises: kept, moved later (by reason), pending, those refused,
        and the error of the likely start beside them (server/rpc/promise_watch.py records
        them)."""
        d = ("dispatcher",)
        self.promised_starts = Counter(
            "hpcdispatch_promised_starts_total",
            "Jobs holding a promise that started (outcome: kept = no later than the first start "
            "this server promised them or they brought with a valid token, late = later).",
            (*d, "outcome"), registry=r)
        self.promise_moved_later = Histogram(
            "hpcdispatch_promise_moved_later_seconds",
            "How much later a promise moved when it could not be kept, one observation per "
            "move (reason: node_unavailable = a node went down, ran_past_limit = a running job "
            "ran past its requested time, shape_changed = the job's request changed, "
            "older_promise = an older promise took its room, unspecified = not said).",
            (*d, "reason"), buckets=PROMISE_BUCKETS, registry=r)
        self.likely_start_error = Histogram(
            "hpcdispatch_likely_start_error_seconds",
            "How far a promised job started from the likely start told beside its first "
            "promise (ExpectedStart.likely_start, the predictor's plan), either way, one "
            "observation per started job that was told one.", d,
            buckets=ERROR_BUCKETS, registry=r)
        self.promises_pending = Gauge(
            "hpcdispatch_promises_pending",
            "Waiting jobs holding a promise, as the latest decision of each caller and "
            "cluster reported them.", registry=r)
        self.promises_refused = Counter(
            "hpcdispatch_promises_refused_total",
            "Promised starts sent back that were not believed, their jobs treated as holding "
            "no promise (reason: missing = no token, malformed = not a token of this service "
            "or no start, expired = past the token's expiry, invalid = not signed by a key of "
            "this server for this job, cluster, caller and start, older = the older promises "
            "it was planned around not all sent, reshaped = the job's units, request or "
            "requested time changed).", ("reason",), registry=r)

    # -- decisions ----------------------------------------------------------------------------

    def observe_decision(
        self, report: pb.DecisionReport, queued: int, running: int, started: int
    ) -> None:
        """Record one answered decision from its report (labelled with the registered name
        the server put in it)."""
        name = report.dispatcher_name or dispatcher_label(report.dispatcher)
        series = self._decision_series.get(name)
        if series is None:  # (`labels` takes a lock and builds its key at every call)
            series = self._decision_series[name] = _DecisionSeries(
                self.build_seconds.labels(name), self.solve_seconds.labels(name),
                self.decision_seconds.labels(name), self.attempts.labels(name),
                self.model_variables.labels(name), self.model_constraints.labels(name),
                self.jobs_considered.labels(name), self.jobs_started.labels(name))
        series.build_seconds.observe(report.build_seconds)
        series.solve_seconds.observe(report.solve_seconds)
        series.decision_seconds.observe(report.total_seconds)
        series.attempts.observe(len(report.attempts))
        counted = self._decisions_by_status.get((name, report.status))
        if counted is None:
            counted = self._decisions_by_status[name, report.status] = self.decisions.labels(
                name, status_label(report.status))
        counted.inc()
        series.model_variables.observe(report.model_variables)
        series.model_constraints.observe(report.model_constraints)
        series.jobs_considered.inc(len(report.considered_job_ids))
        series.jobs_started.inc(started)
        self.queue_depth.set(queued)
        self.running_jobs.set(running)

    def count_fallback(self, dispatcher: int, reason: str) -> None:
        """reason: "dispatcher_error" or "check_failed" (a small fixed set, never free text)."""
        self.fallbacks.labels(dispatcher_label(dispatcher), reason).inc()

    def count_check_failure(self, dispatcher: int) -> None:
        self.check_failures.labels(dispatcher_label(dispatcher)).inc()

    def count_predictor_failure(self, name: str, reason: str, detail: str = "") -> None:
        """A plugin's predictor failed a batch; `name` is a registered name, `reason` one of
        the guard's REASONS (both bounded), `detail` goes to the log only."""
        self.predictor_failures.labels(name, reason).inc()

    def show_plugins(self, group: str, loaded: Iterable[str], failed: Iterable[str]) -> None:
        """The plugins of `group` ("dispatcher", "predictor") that loaded and that did not."""
        for name in loaded:
            self.plugins_loaded.labels(group, name).set(1)
        for name in failed:
            self.plugins_loaded.labels(group, name).set(0)

    def count_refused(self, reason: str) -> None:
        """reason: "deadline", "threads", "share" or "cancelled"."""
        self.decisions_refused.labels(reason).inc()

    def count_session_failure(self, reason: int) -> None:
        """reason: a pb.SessionFailure value."""
        name = pb.SessionFailure.Name(pb.SessionFailure.ValueType(reason))
        self.session_failures.labels(name.removeprefix("SESSION_FAILURE_").lower()).inc()

    def count_abandoned(self, stage: str) -> None:
        """stage: one of the pipeline's fixed stage names."""
        self.decisions_abandoned.labels(stage).inc()

    def count_predictor_store_fallback(self, cluster: str) -> None:
        """A prediction batch went on without the (unavailable) knowledge base."""
        self.predictor_store_fallbacks.labels(cluster).inc()

    # -- predictor error ----------------------------------------------------------------------

    def remember_predictions(
        self, cluster: str, predictor: int, starts: Iterable[tuple[str, int]]
    ) -> None:
        """Keep (job id, predicted duration) of started jobs; the oldest go when memory is full."""
        name = predictor_label(predictor)
        with self._lock:
            predictions = self._predictions
            for job_id, duration in starts:
                key = (cluster, job_id)
                if key in predictions:  # a new key goes to the end by itself
                    predictions.move_to_end(key)
                predictions[key] = (name, duration)
            evicted = 0
            while len(predictions) > self._memory:
                predictions.popitem(last=False)
                evicted += 1
            self.predictions_pending.set(len(predictions))
        if evicted:
            self.predictions_evicted.inc(evicted)

    def observe_completions(
        self, cluster: str, completions: Iterable[tuple[str, int, int]]
    ) -> int:
        """(job id, start, end) of finished jobs; returns how many matched a prediction."""
        matched = []
        with self._lock:
            for job_id, start, end in completions:
                found = self._predictions.pop((cluster, job_id), None)
                if found is not None:
                    matched.append((found[0], abs((end - start) - found[1])))
            self.predictions_pending.set(len(self._predictions))
        for predictor, error in matched:
            self.predictor_error.labels(predictor).observe(error)
        return len(matched)

    # -- exposition ---------------------------------------------------------------------------

    def exposition(self) -> bytes:
        """The registry in Prometheus' text format."""
        return generate_latest(self.registry)

    def start_http(
        self, host: str, port: int, tls: MetricsTls | None = None, auth: BasicAuth | None = None
    ) -> int:
        """Serve /metrics on host:port (port 0: a free one), over HTTPS with `tls`, behind basic
        auth with `auth`; returns the bound port."""
        self._http, self._http_thread = start_metrics_http(self.registry, host, port, tls, auth)
        return int(self._http.server_port)

    def stop_http(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None

    def interceptor(self) -> MetricsInterceptor:
        return MetricsInterceptor(self)


class MetricsInterceptor(AroundInterceptor):
    """grpc_server_started_total, grpc_server_handled_total, grpc_server_handling_seconds."""

    def __init__(self, metrics: ServiceMetrics) -> None:
        self.metrics = metrics

    def around_for(self, details: grpc.HandlerCallDetails,
                   handler: grpc.RpcMethodHandler) -> Around:
        service, method = split_method(details.method)
        m = self.metrics

        @asynccontextmanager
        async def around(kind: str, request: Any, context: Any) -> AsyncIterator[Any]:
            labels = (service, method, kind)
            m.rpc_started.labels(*labels).inc()
            began = time.perf_counter()
            code = grpc.StatusCode.OK
            try:
                yield request
            except asyncio.CancelledError:  # the caller left, or its deadline passed
                code = _code_of(context) or _cancelled_code(context)
                raise
            except BaseException:
                code = _code_of(context) or grpc.StatusCode.UNKNOWN
                raise
            finally:
                m.rpc_handled.labels(*labels, code_label(code)).inc()
                m.rpc_seconds.labels(*labels).observe(time.perf_counter() - began)

        return around


def _code_of(context: Any) -> grpc.StatusCode | None:
    """The code set by abort() / set_code() (None when none was)."""
    code: grpc.StatusCode | None = context.code()
    return code


def _cancelled_code(context: Any) -> grpc.StatusCode:
    """DEADLINE_EXCEEDED for a call cancelled at its deadline, CANCELLED otherwise."""
    left = context.time_remaining()
    return (grpc.StatusCode.DEADLINE_EXCEEDED if left is not None and left <= 0
            else grpc.StatusCode.CANCELLED)
