"""The decision front both servicers decide through: a decision slot (a decision thread and
admission), the search control under the slot's deadline, the pipeline (`run_decision`), the
metrics of the decision, and its wire answer.

Dispatch hands it the snapshot it took in, a session the snapshot, occupancy and facts it keeps;
either way the decision is made, checked, counted and answered the same way.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import grpc
import structlog

from hpcdispatch import catalog
from hpcdispatch.catalog import dispatcher_kind, enum_value, predictor_kind
from hpcdispatch.proto_convert import add_starts
from hpcdispatch.snapshot import Snapshot
from hpcdispatch.v1 import dispatcher_pb2 as pb

from ..config import ServerConfig
from ..core_wire import (
    attempt_end_to_pb,
    promise_move_to_pb,
    skip_reason_to_pb,
    solve_status_to_pb,
)
from ..domain.duration_predictor import DurationPredictor
from ..domain.outcome_kinds import PromiseMove
from ..domain.profiles import PROFILES
from ..domain.search_control import SearchControl
from ..domain.search_settings import SearchSettings
from ..intake.decision_options import DecisionOptions
from ..pipeline import (
    DecisionAbandoned,
    DecisionResult,
    Predictors,
    Situation,
    decide_on,
    predictions_within,
)
from .admission import DecisionAdmission, Refused
from .decision_threads import SHARE_TAKEN, DecisionThreads, identity_reserve, identity_share
from .metrics import ServiceMetrics
from .promise_watch import PromiseWatch
from .tls import caller_identity

log = structlog.get_logger("hpcdispatch.server")

# Time kept back from the caller's deadline for stopping the solver, checking and answering:
# a tenth of the time left, at least DEADLINE_MARGIN_SECONDS (50 ms was too little on a loaded
# 2-core machine: a 2.5 s deadline was exceeded while the decision was being finished).
DEADLINE_MARGIN_SECONDS = 0.2
DEADLINE_MARGIN_SHARE = 0.1


def predictor_name(kind: int) -> str:
    return catalog.predictor_name(kind) or str(kind)


def dispatcher_name(kind: int) -> str:
    return catalog.dispatcher_name(kind) or str(kind)


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
    identity: str = ""  # who calls (tls.caller_identity, as sessions are owned): its books

    @staticmethod
    def of(kind: int, context: grpc.ServicerContext, received: float,
           max_seconds: float, identity: str = "") -> DecisionSlot:
        """Keep back from the caller's deadline (read on arrival) the time to stop the
        solver, check and answer; `max_seconds` when the caller sets no deadline."""
        left = context.time_remaining()
        budget = max_seconds if left is None else min(left - deadline_margin(left), max_seconds)
        return DecisionSlot(kind, received + max(budget, 0.0), lambda: not context.is_active(),
                            identity)

    def stopped(self) -> bool:
        """The slot's time is up or its caller gone (as its SearchControl would say)."""
        return self.deadline - time.monotonic() <= 0 or self.cancelled()


@dataclass(frozen=True, slots=True)
class Decided:
    """A decision answered: the wire answer and how it was reached."""

    response: pb.DispatchResponse
    result: DecisionResult
    situation: Situation
    predictor: int  # the predictor kind used
    settings: SearchSettings
    situation_seconds: float  # to build the situation (a session's snapshot), 0 when given


class DecisionFront:
    """The server's decisions, Dispatch's and the sessions' (unary or on a stream): their
    decision threads and admission, how they are made, counted and answered."""

    def __init__(
        self, config: ServerConfig, predictors: Predictors, metrics: ServiceMetrics,
    ) -> None:
        if config.default_profile not in PROFILES:
            raise ValueError(f"unknown default profile {config.default_profile!r}")
        self.config = config
        self.predictors = predictors
        self.metrics = metrics
        self.default_dispatcher = dispatcher_kind(config.default_dispatcher)
        self.default_predictor = predictor_kind(config.default_predictor)
        # Decisions in progress or waiting for a slot may hold all pool threads but one, which
        # stays for completion reports, DescribeService and the calls that decide nothing; of
        # them, `decision_concurrency` compute at once and the others wait in the admission
        # queue while their deadline allows. One identity holds at most its share; one holding
        # none gets a reserve thread when the shared are taken (the pool has a thread for each).
        self.decision_threads = max(1, config.workers - 1)
        self.threads = DecisionThreads(
            self.decision_threads, identity_share(config, self.decision_threads),
            identity_reserve(config))
        self.admission = DecisionAdmission(
            min(config.decision_concurrency or cpu_count(), self.decision_threads)
        )
        metrics.decisions_waiting.set_function(lambda: self.admission.waiting)
        self.promises = PromiseWatch(config, metrics)  # verified in, signed out, counted

    def admitting(self) -> bool:
        """Whether the service as a whole could admit a decision now. With client
        certificates: an identity holding no decision would get a decision thread (a shared
        or a reserve one) and, running none, its own slot. Without (one identity): a decision
        thread is free, and admission is not refusing every decision (all slots busy, and none
        given since one was refused for its deadline)."""
        if self.config.tls_client_ca:
            return self.threads.admitting_newcomer()
        return self.threads.free > 0 and not self.admission.refusing

    @contextmanager
    def slot(
        self, dispatcher: int, context: grpc.ServicerContext, received: float,
        profile: str = "",
    ) -> Iterator[DecisionSlot]:
        """A decision thread and an admission slot for one decision of `dispatcher` under
        `profile` (the server's defaults when unset: their cost is what admission weighs);
        aborts the call with RESOURCE_EXHAUSTED when refused, CANCELLED or DEADLINE_EXCEEDED
        when the decision is abandoned. A stream's message takes them as a unary call does,
        for its decision alone."""
        identity = caller_identity(context)
        self._take_thread(context, identity)
        try:
            slot = DecisionSlot.of(dispatcher or self.default_dispatcher, context, received,
                                   self.config.max_decision_seconds, identity)
            try:
                admitted = self.admission.enter(
                    (slot.kind, profile or self.config.default_profile), slot.deadline,
                    slot.cancelled, identity)
            except Refused as refused:
                self.metrics.count_refused("cancelled" if refused.cancelled else "deadline")
                log.warning("decision refused", reason=str(refused), dispatcher=slot.kind,
                            waiting=self.admission.waiting)
                context.abort(grpc.StatusCode.CANCELLED if refused.cancelled
                              else grpc.StatusCode.RESOURCE_EXHAUSTED, str(refused))
            self.metrics.decisions_in_progress.inc()
            finished = False
            try:
                yield slot
                finished = True
            except DecisionAbandoned as abandoned:
                self.metrics.count_abandoned(abandoned.stage)
                log.warning("decision abandoned", stage=abandoned.stage,
                            cancelled=abandoned.cancelled)
                context.abort(grpc.StatusCode.CANCELLED if abandoned.cancelled
                              else grpc.StatusCode.DEADLINE_EXCEEDED, str(abandoned))
            finally:
                self.admission.leave(admitted, measure=finished)
                self.metrics.decisions_in_progress.dec()
        finally:
            self.threads.give_back(identity)

    def _take_thread(self, context: grpc.ServicerContext, identity: str) -> None:
        """One of the workers - 1 decision threads, within the caller's share, or
        RESOURCE_EXHAUSTED at once: a call must not wait without a deadline check behind a
        queue of decisions (clients retry with backoff)."""
        refused = self.threads.take(identity)
        if refused is None:
            return
        self.metrics.count_refused(refused)
        if refused == SHARE_TAKEN:
            log.warning("decision refused: the caller's share of the decision threads is busy",
                        share=self.threads.per_identity, threads=self.decision_threads)
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"this client identity has {self.threads.per_identity} decisions in "
                          f"progress or waiting, its share of the server's "
                          f"{self.decision_threads} (max_decisions_per_identity); retry with "
                          "backoff")
        reserve = self.threads.reserve
        log.warning("decision refused: all decision threads busy",
                    threads=self.decision_threads, reserve=reserve)
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                      f"{self.decision_threads} decisions in progress or waiting, the server's "
                      "limit (workers - 1)"
                      + (f", and the {reserve} reserve threads (identity_reserve) are held by "
                         "other identities or this one holds a decision already" if reserve
                         else "") + "; retry with backoff")

    def control(self, options: DecisionOptions, slot: DecisionSlot) -> SearchControl:
        """The search settings, allocator and solver workers asked for, under the slot's
        deadline and cancellation, for the slot's caller (whose books it reads)."""
        return options.control(slot.deadline, self.config.solver_workers, slot.cancelled,
                               slot.identity)

    def decide(
        self, situation: Situation, options: DecisionOptions, slot: DecisionSlot,
        received: float,
    ) -> Decided:
        """Decide on a snapshot taken in (Dispatch): abandoned at once when the slot's time is
        already up or its caller gone."""
        if slot.stopped():
            raise DecisionAbandoned("convert", cancelled=slot.cancelled())
        return self.decide_built(lambda kind, predictor: situation, options, slot, received)

    def decide_built(
        self, build: Callable[[int, DurationPredictor], Situation], options: DecisionOptions,
        slot: DecisionSlot, received: float,
    ) -> Decided:
        """Decide on the situation `build(predictor kind, predictor)` gives (a session's, whose
        snapshot carries the durations of the predictor asked for), check, count, answer."""
        kind, predictor_kind_ = slot.kind, options.predictor or self.default_predictor
        control = self.control(options, slot)
        predictor = self.predictors.predictor(options.cluster, predictor_kind_, slot.identity)
        built = time.monotonic()
        with predictions_within(control):  # a plugin predictor's share of the deadline
            situation = build(predictor_kind_, predictor)
        situation_seconds = time.monotonic() - built
        result = decide_on(situation, kind, predictor, control)
        response = self.answer(situation.snapshot, result, kind, predictor_kind_,
                               control.settings, options.cluster, received)
        self.promises.answered(response, situation.snapshot, control.scope)
        return Decided(response, result, situation, predictor_kind_, control.settings,
                       situation_seconds)

    def answer(
        self, snapshot: Snapshot, result: DecisionResult, kind: int, predictor_kind: int,
        settings: SearchSettings, cluster: str, received: float,
    ) -> pb.DispatchResponse:
        """The wire answer of a checked decision, counted in the metrics."""
        for failed in result.check_failures:
            self.metrics.count_check_failure(failed)
        if result.fallback_code:
            self.metrics.count_fallback(kind, result.fallback_code)
        response = pb.DispatchResponse(time=snapshot.time)
        starts = result.decision.starts
        if starts:  # (the queue's requests read only when some job starts)
            add_starts(response, starts, {q.id: q.unit_request for q in snapshot.queued})
        report = response.report
        _report(report, kind, predictor_kind, settings, result)
        report.fallback_reason = result.fallback_reason
        report.total_seconds = time.monotonic() - received
        self.metrics.observe_decision(
            report, len(snapshot.queued), len(snapshot.running), len(response.starts)
        )
        self.metrics.remember_predictions(
            cluster, predictor_kind, ((s.job_id, s.expected_duration) for s in starts))
        return response


def _report(
    report: pb.DecisionReport, kind: int, predictor: int, settings: SearchSettings,
    result: DecisionResult,
) -> None:
    problem, outcome = result.problem, result.outcome
    # The enum values of built-ins (0 for a plugin's), and the names of every one.
    report.dispatcher = pb.Dispatcher.ValueType(enum_value(kind, pb.Dispatcher))
    report.predictor = pb.Predictor.ValueType(enum_value(predictor, pb.Predictor))
    report.dispatcher_name = dispatcher_name(kind)
    report.predictor_name = predictor_name(predictor)
    report.profile = settings.profile
    report.status = solve_status_to_pb(outcome.status)
    report.model_variables = outcome.variables
    report.model_constraints = outcome.constraints
    report.build_seconds = outcome.build_seconds
    report.solve_seconds = outcome.solve_seconds
    for a in outcome.attempts:
        attempt = report.attempts.add(
            time_limit_ms=a.time_limit_ms, status=solve_status_to_pb(a.status),
            wall_seconds=a.wall_seconds, ended_by=attempt_end_to_pb(a.ended_by),
        )
        if a.objective is not None:
            attempt.objective = a.objective
    if outcome.objective is not None:
        report.objective = outcome.objective
    report.considered_job_ids.extend(problem.jobs[i].id for i in outcome.considered)
    for i, reason in outcome.skipped:
        report.skipped_jobs.add(job_id=problem.jobs[i].id, reason=skip_reason_to_pb(reason))
    for i, (start, promised) in outcome.expected_starts.items():
        expected = report.expected_starts.add(
            job_id=problem.jobs[i].id, start_time=problem.t + start, promised=promised)
        if not promised:
            continue  # an estimate: start_time is itself the likely start
        if (likely := outcome.likely_starts.get(i)) is not None:
            expected.likely_start = problem.t + min(likely, start)  # never after the promise
        if (moved := outcome.promises_moved.get(i, 0)) > 0:
            expected.moved_later_seconds = moved
            why = outcome.promise_move_reasons.get(i, PromiseMove.UNSPECIFIED)
            if why not in PromiseMove._value2member_map_:
                why = PromiseMove.UNSPECIFIED  # a plugin's number that names no reason
            expected.move_reason = promise_move_to_pb(why)
