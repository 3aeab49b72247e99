"""The decision pipeline, free of the wire format: durations, problem, dispatcher, check, fallback.

The gRPC service, the tests and the benchmarks decide through `run_decision`, so what is tested
is what the service runs. The stages, in order:

1. durations: d_i of every queued job from the predictor (one batched call); d_i of every
   running job from the caller's `expected_duration`, else from the predictor, corrected
   upwards once the job has outlived its prediction (`corrected_duration`);
2. problem: the snapshot indexed for the dispatchers (`build_problem`); what the running work
   makes of the nodes (its Occupancy) comes from the caller when it keeps it (a session),
   else from the snapshot's running jobs;
3. dispatch: the selected dispatcher's decision under the search control;
4. check: the decision is checked against the snapshot (or the caller's state of the cluster),
   independently of the model that made it (`hpcdispatch.decision_check`); a dispatcher that
   raises, whose decision fails the check or starts nothing where a job fits is replaced by
   EASY backfilling: around the promises it holds where it keeps some (the promise book,
   `CpDispatcher.around_the_promises`), else plain; an EASY decision that fails too starts
   nothing.

Between stages the pipeline gives up (`DecisionAbandoned`) when the caller has gone or the
decision's deadline has passed before the dispatcher could start: nobody waits for the answer,
and the work would only delay the decisions of callers still waiting. Once a dispatcher has
decided, the check always runs: an unchecked decision never leaves the pipeline.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from hpcdispatch.catalog import DISPATCHER_NAMES, dispatcher_name
from hpcdispatch.decision_check import ClusterFacts, SnapshotFacts, check_decision_against
from hpcdispatch.registrations import Registrations
from hpcdispatch.snapshot import Decision, JobStart, QueuedJob, RunningJob, Snapshot

from .dispatchers import BY_NAME, DISPATCHERS
from .dispatchers import REGISTRY as DISPATCHER_REGISTRY
from .dispatchers.base import Dispatcher, Outcome, PromisesUnplaced
from .dispatchers.guard import MalformedOutcome, PluginFailure, PluginUnavailable, RanPastDeadline
from .dispatchers.planning.problem import Problem, build_problem
from .domain.duration_predictor import Completion, DurationPredictor, JobFacts, predict_many
from .domain.lazy_logger import LazyLogger
from .domain.node_index import NodeIndex
from .domain.occupancy import Occupancy
from .domain.outcome_kinds import SolveStatus
from .domain.repeated_failures import RepeatedFailures
from .domain.search_control import SearchControl
from .domain.search_settings import SearchSettings
from .predictors.completion_store import StoreUnavailable
from .predictors.guard import predictions_until
from .predictors.knowledge_base import KnowledgeBaseLimits
from .predictors.registry import FallbackListener, PredictorRegistry
from .predictors.walltime import WalltimePredictor

# Only the pipeline's own names: the rooms above take the shared domain model from
# `server/domain/` and reach the core (`dispatchers/`, `predictors/`) only through what is
# defined here (pyproject.toml's contracts).
__all__ = [
    "FALLBACK_CHECK_FAILED", "FALLBACK_DEADLINE_CUT", "FALLBACK_DISPATCHER_ERROR",
    "FALLBACK_MIN_SECONDS", "FALLBACK_PROMISES_UNPLACED", "FALLBACK_STARTED_NOTHING",
    "PREDICTION_SHARE", "STAGES", "CompletionsNotStored", "DecisionAbandoned", "DecisionResult",
    "Durations", "FinishedJob", "Predictors", "Situation", "completion_of",
    "corrected_duration", "decide_on", "decision_of", "dispatcher_registrations",
    "learn_completions", "load_dispatcher_plugins", "model_variables", "open_predictors",
    "predict_durations", "predictions_within", "queued_facts", "run_decision",
    "running_facts", "unavailable_dispatchers",
]

log = LazyLogger("hpcdispatch.pipeline")

# Why a decision came from the fallback (label values of the fallback counter): the
# dispatcher raised, its decision failed the check, or (a plugin's, dispatchers/guard.py) its
# code could not be loaded, it ran past the deadline, or it answered something unreadable.
FALLBACK_DISPATCHER_ERROR = "dispatcher_error"
FALLBACK_CHECK_FAILED = "check_failed"
# The dispatcher started nothing where a queued job fits now, on an idle system or cut short
# (status UNKNOWN: the deadline passed in a stage): EASY's decision is answered instead.
FALLBACK_STARTED_NOTHING = "started_nothing"
# A stage of the dispatcher was cut by the deadline after its promises were placed: it answered
# EASY's decision around them itself (status FALLBACK, cp/promise_fallback.py).
FALLBACK_DEADLINE_CUT = "deadline_cut"
# The dispatcher keeps promises (the promise book) but they could not be placed in time: the
# fallback is plain EASY, which may take a promise's room (said in the reason and the log).
FALLBACK_PROMISES_UNPLACED = "promises_unplaced"
_FAILURE_TEXT = {
    PluginUnavailable.fallback_code: "dispatcher could not be loaded",
    RanPastDeadline.fallback_code: "dispatcher ran past the deadline",
    MalformedOutcome.fallback_code: "dispatcher answered a malformed outcome",
    PluginFailure.fallback_code: "dispatcher failed",
}
# Time the fallback (EASY) gets at least, whatever the dispatcher before it left.
FALLBACK_MIN_SECONDS = 0.5
# The fallback's kind (the registry's number of the name `easy`).
_FALLBACK_KIND = DISPATCHER_NAMES["easy"]
# The share of the time a decision has left that a plugin's predictions may take
# (predictors/guard.py): the rest stays the dispatcher's.
PREDICTION_SHARE = 0.5
# Dispatcher failures by (dispatcher, reason), for their log lines (`_log_failure`).
_FAILURES = RepeatedFailures()


# The stages, as named in logs, metrics (label `stage`) and errors.
STAGES = ("convert", "predict", "problem", "dispatch", "check")


class DecisionAbandoned(Exception):
    """The caller is gone, or its deadline passed, before the decision could be made."""

    def __init__(self, stage: str, cancelled: bool) -> None:
        why = "the caller cancelled" if cancelled else "the decision's deadline passed"
        super().__init__(f"decision abandoned before its {stage!r} stage: {why}")
        self.stage = stage
        self.cancelled = cancelled


@dataclass(frozen=True, slots=True)
class Durations:
    """d_i in seconds (>= 1) of every queued and running job, by job id."""

    queued: dict[str, int]
    running: dict[str, int]


@dataclass(frozen=True, slots=True)
class Situation:
    """What a decision is made on: the snapshot and its node index; a caller that keeps the
    cluster state between decisions (a session) adds what it keeps (see `run_decision`): the
    running work's occupancy, the facts the check reads, the queued jobs' durations."""

    snapshot: Snapshot
    nodes: NodeIndex
    occupancy: Occupancy | None = None
    facts: ClusterFacts | None = None
    queued_durations: Callable[[], dict[str, int]] | None = None


@dataclass(slots=True)
class DecisionResult:
    """A checked decision and how it was reached."""

    problem: Problem
    outcome: Outcome  # of the dispatcher whose decision is returned (the fallback's, if used)
    decision: Decision
    fallback_reason: str = ""  # human-readable; empty when the selected dispatcher decided
    fallback_code: str = ""  # FALLBACK_* or empty
    check_failures: list[int] = field(default_factory=list)  # dispatcher kinds that failed it
    stage_seconds: dict[str, float] = field(default_factory=dict)


class Predictors(Protocol):
    """The service's duration predictors, as the rooms above use them: by caller scope (the
    client identity that calls, "" without client certificates, and the cluster it names) and
    kind, taught by the completions that identity reports for that cluster, with their
    registrations (`open_predictors` makes them)."""

    @property
    def registrations(self) -> Registrations: ...

    def kinds(self) -> list[int]: ...

    def predictor(self, cluster: str, kind: int, identity: str = "") -> DurationPredictor: ...

    def learn(self, cluster: str, completions: Iterable[Completion], identity: str = "") -> int:
        ...

    def load_plugins(self) -> dict[str, str]: ...

    def unavailable(self) -> dict[str, str]: ...

    def close(self) -> None: ...


def open_predictors(
    store_path: str | None = None, limits: KnowledgeBaseLimits | None = None,
    on_store_fallback: FallbackListener | None = None,
    on_predictor_failure: Callable[[str, str, str], None] | None = None,
) -> Predictors:
    """The registered predictors over one knowledge base: `store_path` an SQLite file or a
    PostgreSQL URL (None: in memory), within `limits`; the listeners are told when predictions
    went on without the store (cluster) and when a predictor failed (see PredictorRegistry)."""
    return PredictorRegistry(store_path=store_path, on_store_fallback=on_store_fallback,
                             limits=limits, on_predictor_failure=on_predictor_failure)


class CompletionsNotStored(Exception):
    """The knowledge base could not be reached: none of the completions is known to be stored,
    and the report must not be acknowledged (storing is idempotent: the caller retries)."""


def learn_completions(predictors: Predictors, cluster: str, finished: Iterable[FinishedJob],
                      identity: str = "") -> int:
    """Teach the predictors of `identity`'s `cluster` the finished jobs it reported
    (ReportCompletions); how many were taken. Raises CompletionsNotStored when the knowledge
    base is out of reach."""
    try:
        return predictors.learn(cluster, (completion_of(f) for f in finished), identity)
    except StoreUnavailable as exc:
        raise CompletionsNotStored(str(exc)) from exc


def dispatcher_registrations() -> Registrations:
    """The dispatchers offered: the built-ins and the plugins registered by name."""
    return DISPATCHER_REGISTRY.registrations


def load_dispatcher_plugins() -> dict[str, str]:
    """Load every plugin's dispatcher now; {name: why} of those that could not be loaded."""
    return DISPATCHER_REGISTRY.load_plugins()


def unavailable_dispatchers() -> dict[str, str]:
    """{name: why} of the registered dispatchers whose code failed to load so far."""
    return DISPATCHER_REGISTRY.unavailable()


def queued_facts(job: QueuedJob) -> JobFacts:
    return JobFacts(
        user=job.user, name=job.name, queue=job.queue, units=job.units,
        unit_request=job.unit_request, requested_time=job.requested_time,
        actual_duration=job.actual_duration,
    )


def running_facts(job: RunningJob) -> JobFacts:
    first = job.units[0].amounts if job.units else {}
    return JobFacts(
        user=job.user, name=job.name, queue="", units=len(job.units),
        unit_request=first, requested_time=job.requested_time,
    )


class FinishedJob(Protocol):
    """A completion as reported: the wire's JobCompletion or the domain's (same fields)."""

    @property
    def job_id(self) -> str: ...

    @property
    def user(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def queue(self) -> str: ...

    @property
    def units(self) -> int: ...

    @property
    def unit_request(self) -> Mapping[str, int]: ...

    @property
    def requested_time(self) -> int: ...

    @property
    def start_time(self) -> int: ...

    @property
    def end_time(self) -> int: ...


def completion_of(finished: FinishedJob) -> Completion:
    """What the predictors' knowledge base learns of a finished job."""
    return Completion(
        job_id=finished.job_id,
        facts=JobFacts(
            user=finished.user, name=finished.name, queue=finished.queue, units=finished.units,
            unit_request=dict(finished.unit_request), requested_time=finished.requested_time,
        ),
        start_time=finished.start_time,
        end_time=finished.end_time,
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


def predict_durations(
    snapshot: Snapshot, predictor: DurationPredictor, running: bool = True,
    queued: dict[str, int] | None = None,
) -> Durations:
    """Stage 1: one batched prediction for the queued jobs, one for the running jobs the
    caller gave no `expected_duration` (none, and no running durations, without `running`:
    the caller keeps them, e.g. in a session's Occupancy). `queued`: the queued jobs'
    durations by id when the caller keeps them (a session), as predicted here."""
    if queued is not None:
        queued_durations = queued
    else:
        queued_durations = dict(zip(
            (q.id for q in snapshot.queued),
            predict_many(predictor, [queued_facts(q) for q in snapshot.queued]), strict=True))
    if not running:
        return Durations(queued_durations, {})
    jobs = snapshot.running
    guess: list[int | None] = [r.expected_duration for r in jobs]
    unknown = [i for i, d in enumerate(guess) if d is None]
    for i, d in zip(unknown, predict_many(predictor, [running_facts(jobs[i]) for i in unknown]),
                    strict=True):
        guess[i] = d
    # corrected_duration over every running job at once.
    predicted = np.asarray(guess, dtype=np.int64)
    start = np.fromiter((r.start_time for r in jobs), dtype=np.int64, count=len(jobs))
    requested = np.fromiter((r.requested_time for r in jobs), dtype=np.int64, count=len(jobs))
    outlived = start + predicted <= snapshot.time
    corrected = np.where(outlived, np.maximum(predicted, requested), predicted)
    running_durations = dict(zip((r.id for r in jobs), corrected.tolist(), strict=True))
    return Durations(queued_durations, running_durations)


def decision_of(problem: Problem, outcome: Outcome) -> Decision:
    """The wire-free decision: node ids of every unit of the jobs that start at t."""
    jobs, node_id, placements = problem.jobs, problem.node_ids.__getitem__, outcome.placements
    starts = []
    for i in sorted(placements):
        job = jobs[i]
        starts.append(JobStart(job.id, tuple(map(node_id, placements[i])), job.duration))
    return Decision(time=problem.t, starts=starts)


def model_variables(snapshot: Snapshot, dispatcher: str, settings: SearchSettings) -> int:
    """Variables of the model CP dispatcher `dispatcher` (a registered name) would search on
    `snapshot` under `settings`, built even where its decision builds none; requested times
    stand in for predictions (variable counts do not depend on the durations). 0: no job would
    enter one; ValueError: `dispatcher` builds no model. (The 2020 paper's Figure 6 compares
    model sizes on the same instances: benchmarks/same_instances/model_size.py.)"""
    # Imported here, not when the pipeline loads: the CP models bring OR-Tools (and pandas with
    # it), which a process that runs only the baselines (an EASY replay) never needs.
    from .dispatchers.cp.model_variables import model_variables as cp_model_variables

    durations = predict_durations(snapshot, WalltimePredictor())  # the service's own stage
    problem = build_problem(snapshot, durations.queued, durations.running)
    return cp_model_variables(problem, BY_NAME[dispatcher], dispatcher, settings)


@contextmanager
def predictions_within(control: SearchControl) -> Iterator[None]:
    """Within the block, a plugin's predictions are waited for PREDICTION_SHARE of the time
    `control` has left at most, and not once its caller is gone (predictors/guard.py)."""
    left = max(control.remaining(), 0.0)
    with predictions_until(time.monotonic() + PREDICTION_SHARE * left, control.cancelled):
        yield


def _give_up_if_stopped(control: SearchControl, stage: str) -> None:
    if control.cancelled():
        raise DecisionAbandoned(stage, cancelled=True)
    if control.remaining() <= 0:
        raise DecisionAbandoned(stage, cancelled=False)


def run_decision(
    snapshot: Snapshot,
    dispatcher_kind: int,
    predictor: DurationPredictor,
    control: SearchControl,
    nodes: NodeIndex | None = None,
    dispatchers: Mapping[int, Dispatcher] | None = None,
    occupancy: Occupancy | None = None,
    facts: ClusterFacts | None = None,
    queued_durations: Callable[[], dict[str, int]] | None = None,
) -> DecisionResult:
    """Decide which queued jobs of `snapshot` start now, and where; the result is checked.

    `nodes` is the node list's index when the caller keeps one (see server/intake/node_table.py);
    `dispatchers` defaults to the registry (tests pass stand-ins). A caller that keeps the
    cluster state between decisions (a session) passes `occupancy`, what the running work of
    `snapshot` makes of the nodes (with `nodes`: its rows are indexed by it), and `facts`, the
    same state for the independent check; neither is then recomputed from `snapshot.running`.
    It may also keep the queued jobs' durations: `queued_durations()` gives them (as
    `predict_durations` predicts them) in the predict stage.
    Raises DecisionAbandoned when the caller goes away (or the deadline passes) before the
    dispatcher starts.
    """
    table = DISPATCHERS if dispatchers is None else dispatchers
    seconds: dict[str, float] = {}
    clock = time.monotonic()

    def lap(stage: str) -> None:
        nonlocal clock
        now = time.monotonic()
        seconds[stage] = now - clock
        clock = now

    _give_up_if_stopped(control, "predict")
    assert occupancy is None or nodes is not None, "an occupancy is indexed by its nodes"
    with predictions_within(control):
        durations = predict_durations(
            snapshot, predictor, running=occupancy is None,
            queued=None if queued_durations is None else queued_durations())
    lap("predict")
    _give_up_if_stopped(control, "problem")
    problem = build_problem(snapshot, durations.queued, durations.running, nodes, occupancy)
    problem.limits_predictor = getattr(predictor, "name", "") in LIMITS_PREDICTORS
    lap("problem")
    _give_up_if_stopped(control, "dispatch")
    checked = facts if facts is not None else SnapshotFacts(snapshot)
    result = _dispatch_and_check(problem, checked, dispatcher_kind, control, table)
    lap("dispatch")
    result.stage_seconds = seconds
    return result


def decide_on(
    situation: Situation, dispatcher_kind: int, predictor: DurationPredictor,
    control: SearchControl,
) -> DecisionResult:
    """`run_decision` on what `situation` gives."""
    return run_decision(situation.snapshot, dispatcher_kind, predictor, control, situation.nodes,
                        occupancy=situation.occupancy, facts=situation.facts,
                        queued_durations=situation.queued_durations)


def _dispatched(
    problem: Problem, kind: int, name: str, control: SearchControl,
    dispatchers: Mapping[int, Dispatcher],
) -> tuple[Outcome | None, str, str]:
    """Stage 3: (the dispatcher's outcome, "", "") or, when it failed, (None, the fallback's
    reason, its FALLBACK_* code), the failure logged."""
    try:
        return dispatchers[kind].decide(problem, control), "", ""
    except PluginFailure as failure:  # a plugin that failed to load, overran, or answered junk
        code = failure.fallback_code
        _log_failure("dispatcher failed", name, code, error=failure.detail, reason=code)
        return None, f"{_FAILURE_TEXT[code]} ({name}): {failure.detail}", code
    except Exception as exc:  # a dispatcher bug must not cost the caller a decision
        code = FALLBACK_DISPATCHER_ERROR
        _log_failure("dispatcher failed", name, code, error=repr(exc),
                     trace=traceback.format_exc())
        return None, f"dispatcher error ({name}): {exc!r}", code


def _log_failure(event: str, name: str, code: str, trace: str = "", **fields: object) -> None:
    """Log a dispatcher's failure: the first of its kind (dispatcher, reason) in full, with its
    traceback; then only the 10th, 100th, ... with the count so far (the fallback counter of
    the metrics counts every one)."""
    seen = _FAILURES.count((name, code))
    if not RepeatedFailures.worth_a_line(seen):
        return
    if seen == 1:
        log.error(event, dispatcher=name, **fields, **({"trace": trace} if trace else {}))
    else:
        log.error(event, dispatcher=name, **fields, failures_so_far=seen,
                  note="the same failure again; only the 1st, 10th, 100th, ... are logged")


def _left_idle(problem: Problem, outcome: Outcome) -> bool:
    """Whether `outcome` starts nothing while a queued job fits in what is free now, on an
    idle system (nothing runs) or cut short (status UNKNOWN: a stage ran out of time): never
    an answer, whatever the dispatcher's plan (EASY's decision is taken instead). A job fits
    only where its rules allow it now (`Eligibility.now`: partitions, features, windows)."""
    if outcome.placements or not problem.jobs:
        return False
    if len(problem.running.ends) and outcome.status != SolveStatus.UNKNOWN:
        return False
    units_fit, masks = problem.free_now.units_fit, problem.eligibility
    return any(units_fit(job.req, job.units) >= job.units and (
        masks is None or (mask := masks.now(job.index)) is None
        or problem.free_now.choose(job.req, job.units, False, mask) is not None)  # its rules
        for job in problem.jobs)


def _around_the_promises(
    dispatchers: Mapping[int, Dispatcher], kind: int, name: str, problem: Problem,
    facts: ClusterFacts, control: SearchControl,
) -> tuple[tuple[Outcome, Decision] | None, bool]:
    """The fallback of a dispatcher that keeps promises (the promise book): EASY's decision
    around the promises it holds (`CpDispatcher.around_the_promises`), checked, or None; and
    whether it holds promises it could not place (or answer around), said in the log: plain
    EASY answers then."""
    try:
        around = getattr(dispatchers[kind], "around_the_promises", None)
    except Exception:  # a plugin that could not be loaded keeps no promises
        return None, False
    if not callable(around):
        return None, False
    try:
        outcome = around(problem, control)
    except PromisesUnplaced as why:
        log.warning("promises could not be placed: plain EASY's decision answered",
                    dispatcher=name, reason=FALLBACK_PROMISES_UNPLACED, error=str(why))
        return None, True
    except Exception as exc:
        _log_failure("fallback around the promises failed", name, FALLBACK_PROMISES_UNPLACED,
                     error=repr(exc), trace=traceback.format_exc())
        return None, True
    if outcome is None:
        return None, False
    decision = decision_of(problem, outcome)
    problems = check_decision_against(facts, decision)
    if problems:
        _log_failure("fallback around the promises failed the check", name,
                     FALLBACK_PROMISES_UNPLACED, problems=problems[:10])
        return None, True
    return (outcome, decision), False


# The predictors whose d_i is the requested time in every decision: a baseline's reservation
# planned on them is a promise (planning/guaranteed_starts.py); under any other, one decision
# whose durations happen to be the requested times (users without a history) is not.
LIMITS_PREDICTORS = frozenset({"walltime"})

# A planned start this far ahead (about 17,000 years) is the planner's "nowhere in this plan"
# (planning/eligibility.py's FOREVER, 2^40 s: a job of reservation R that the jobs planned
# before it leave no room in R): no start is planned for the job, so none is reported, and
# above all none is promised.
NOWHERE_IN_THIS_PLAN_S = 2**39


def _dispatch_and_check(
    problem: Problem, facts: ClusterFacts, kind: int, control: SearchControl,
    dispatchers: Mapping[int, Dispatcher],
) -> DecisionResult:
    """Stages 3-4: the dispatcher's decision if it passes the check, else the fallback's;
    starts planned nowhere in this plan are not reported."""
    result = _checked_or_fallback(problem, facts, kind, control, dispatchers)
    outcome = result.outcome
    for i in [i for i, (s, _) in outcome.expected_starts.items()
              if s >= NOWHERE_IN_THIS_PLAN_S]:
        del outcome.expected_starts[i]
        outcome.likely_starts.pop(i, None)
        outcome.promises_moved.pop(i, None)
    return result


def _checked_or_fallback(
    problem: Problem, facts: ClusterFacts, kind: int, control: SearchControl,
    dispatchers: Mapping[int, Dispatcher],
) -> DecisionResult:
    """The dispatcher's decision if it passes the check, else the fallback's."""
    check_failures: list[int] = []
    name = dispatcher_name(kind) or str(kind)
    outcome, reason, code = _dispatched(problem, kind, name, control, dispatchers)
    if outcome is not None:
        if control.cancelled():  # nobody waits for this decision: do not check it
            raise DecisionAbandoned("check", cancelled=True)
        decision = decision_of(problem, outcome)
        problems = check_decision_against(facts, decision)
        if not problems and outcome.status == SolveStatus.FALLBACK and not _left_idle(
                problem, outcome):  # cut after its promises were placed: EASY around them
            _log_failure("decision cut by the deadline: EASY's around the promises answered",
                         name, FALLBACK_DEADLINE_CUT)
            return DecisionResult(
                problem, outcome, decision,
                f"decision cut by the deadline ({name}): EASY's decision around the "
                "promises held", FALLBACK_DEADLINE_CUT)
        if not problems and not _left_idle(problem, outcome):
            return DecisionResult(problem, outcome, decision)
        if problems:
            code = FALLBACK_CHECK_FAILED
            _log_failure("decision failed the independent check", name, code,
                         problems=problems[:10])
            reason = f"decision failed the check ({name}): {problems[0]}"
            check_failures.append(kind)
        else:
            code = FALLBACK_STARTED_NOTHING
            _log_failure("dispatcher started nothing where a queued job fits", name, code,
                         status=outcome.status.name)
            reason = (f"dispatcher started nothing where a queued job fits ({name}, "
                      f"{outcome.status.name})")
    # The fallback is the safety net: it gets at least FALLBACK_MIN_SECONDS even when the
    # dispatcher used up the budget (EASY stops placing jobs once its control says stop).
    fallback_control = dataclasses.replace(
        control, deadline=time.monotonic() + max(control.remaining(), FALLBACK_MIN_SECONDS)
    )
    around, unplaced = _around_the_promises(dispatchers, kind, name, problem, facts,
                                            fallback_control)
    if around is None:  # no promises held, or not placed in time: plain EASY
        if unplaced:
            code = FALLBACK_PROMISES_UNPLACED
            reason = (f"{reason}; the promises held could not be placed ({name}): plain EASY "
                      "answered, which may take a promise's room")
        fallback = dispatchers[_FALLBACK_KIND].decide(problem, fallback_control)
        decision = decision_of(problem, fallback)
    else:
        fallback, decision = around
        reason = f"{reason}; answered: EASY's decision around the promises held"
    fallback.status = SolveStatus.FALLBACK
    if check_decision_against(facts, decision):
        log.critical("fallback decision failed the check; starting nothing")
        check_failures.append(_FALLBACK_KIND)
        fallback.placements = {}
        decision = Decision(problem.t)
    return DecisionResult(problem, fallback, decision, reason, code, check_failures)
