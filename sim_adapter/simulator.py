"""Event-driven trace replay against a dispatching service (AccaSim's rules).

At each time point the simulator first releases finished jobs, then admits submissions, then,
if jobs are queued and something changed since the last call, asks the dispatcher once with
the whole state and applies its decision. Jobs hold their resources for their actual run
time and are killed at their requested time. Every decision is re-checked with
`hpcdispatch.decision_check.check_decision` (and against the request's own amounts); an
invalid one stops the replay with `InvalidDecisionError`. A backend whose decisions were
checked in this very process against the state the simulator's changes made
(`checks_decisions`: the in-process service, or the replay's own embedded service through a
stream) is not checked twice: every decision still has one independent check.

Running jobs are sent with the d_i the service announced when it started them
(JobStart.expected_duration), so a prediction is fixed for a job's life. Completions are
reported to the service (ReportCompletions) before the next decision call, so the predictors
learn in simulated-time order. With `charge_decision_time`, the wall time of each call,
rounded up to whole seconds, passes in simulated time before the decision takes effect; no
other call is made meanwhile, while releases and submissions go on.

A site's rules (docs/replays.md, *System files*): the nodes carry their partitions and features,
each job the partition its SWF partition number maps to (its queue's priority, and the node
features its partition and its queue require), and each decision the unavailability windows of
`calendar` (window_calendar.py), which the check of every decision holds it to: no job starts
into a window that does not admit it. A window's end is a time point (a job it held back may
start). A job is dropped at its submission, counted by reason, when its SWF partition is not the
system's (`NO_PARTITION`), when the nodes of its partition having its features cannot hold it
(`NEVER_FITS`), or when it is longer than the gap between two occurrences of a recurring window
covering every node it may use (`NEVER_BETWEEN_WINDOWS`).
"""

from __future__ import annotations

import heapq
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hpcdispatch.constraints import NO_FEATURES, FeatureRules
from hpcdispatch.decision_check import check_decision_against
from hpcdispatch.snapshot import (
    Decision,
    JobCompletion,
    Node,
    QueuedJob,
    RunningJob,
    Snapshot,
    UnavailabilityWindow,
    UnitAllocation,
)
from hpcdispatch.systems import System

from .backend import ChangeLog, DispatchBackend, ExpectedStart
from .records import DecisionRecord, JobRecord, ReplayObserver
from .replay_facts import ReplayFacts
from .swf import TraceJob
from .window_calendar import WindowCalendar
from .workload import UnitRule, units_fitting

_Rules = tuple[tuple[str, ...], FeatureRules]  # a job's partitions and node features

if TYPE_CHECKING:
    from tqdm import tqdm

NEVER_FITS = "never fits the system"
NO_PARTITION = "SWF partition not in the system"
NEVER_BETWEEN_WINDOWS = "longer than the gap between its nodes' windows"
# Decisions in a row that start nothing on an idle system, each at a window's end, before the
# replay is stalled (a job a window held back starts at the window's end, or never).
WINDOW_WAKES = 8


class SimulationError(RuntimeError):
    """The replay cannot go on."""


class ReplayInterrupted(Exception):
    """The replay was asked to stop (Ctrl-C) and stopped between two decisions: at time `t`,
    after `decisions` decisions, with `finished` jobs done, `queued` and `running` left."""

    def __init__(self, t: int, decisions: int, finished: int, queued: int,
                 running: int) -> None:
        super().__init__(f"interrupted at t={t}, after {decisions:,} decisions, with "
                         f"{finished:,} jobs finished, {queued:,} queued and {running:,} running")
        self.time, self.decisions, self.finished = t, decisions, finished
        self.queued, self.running = queued, running


class InvalidDecisionError(SimulationError):
    def __init__(self, t: int, problems: list[str]) -> None:
        shown = "; ".join(problems[:5]) + (f" (+{len(problems) - 5} more)" if
                                           len(problems) > 5 else "")
        super().__init__(f"invalid decision at t={t}: {shown}")
        self.time = t
        self.problems = problems


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    charge_decision_time: bool = False
    oracle: bool = False  # send QueuedJob.actual_duration (for the oracle predictor)
    progress: bool = False  # tqdm progress bar on stderr
    expected_jobs: int | None = None  # progress bar total
    progress_label: str = "replay"  # what the bar says it replays (run label, trace)
    stall_retries: int = 3  # calls at t+1, t+2, ... before an idle-system stall is an error
    # Asked between decisions (never during one): True stops the replay with ReplayInterrupted.
    interrupted: Callable[[], bool] | None = None


@dataclass(frozen=True, slots=True)
class ReplayResult:
    jobs: int
    decisions: int
    first_submit: int | None
    last_end: int | None
    wall_seconds: float


@dataclass(slots=True)
class _Live:
    job: TraceJob
    units: int
    request: dict[str, int]
    queued: QueuedJob
    running: RunningJob | None = None
    end: int = 0
    predicted: int = 0
    first_reported: int | None = None  # the first start a decision reported for it
    first_reported_promised: bool = False
    first_promised: int | None = None
    first_promised_likely: int | None = None  # the likely start beside the first promise
    moved_later: list[tuple[int, str]] = field(default_factory=list)  # (seconds, reason)


@dataclass(frozen=True, slots=True)
class _Pending:
    at: int  # when the decision takes effect
    decision: Decision


class Simulator:
    """Replays cleaned trace jobs on `system` through `backend`; see the module docstring."""

    def __init__(
        self,
        system: System,
        rule: UnitRule,
        backend: DispatchBackend,
        observer: ReplayObserver,
        options: ReplayOptions | None = None,
        clock: Callable[[], float] = time.perf_counter,
        calendar: WindowCalendar | None = None,
    ) -> None:
        self.system = system
        self.rule = rule
        self.backend = backend
        self.observer = observer
        self.options = options or ReplayOptions()
        self.clock = clock  # wall clock of the calls (charged with charge_decision_time)
        self.nodes = system.nodes()
        self.types = frozenset(r for n in self.nodes for r in n.capacity)
        self.queue: dict[str, _Live] = {}
        self.running: dict[str, _Live] = {}
        self._ends: list[tuple[int, int, str]] = []
        self._seq = 0
        self._completions: list[JobCompletion] = []
        self._changes = ChangeLog()  # what the backend has not been told yet
        self.calendar = calendar if calendar else None
        self.windows: tuple[UnavailabilityWindow, ...] = ()  # those the last decision was sent
        self.facts = ReplayFacts(self.nodes, self._queued_job, lambda: self.windows)
        # The nodes a job of these partitions and features may use (all: none), and their
        # kinds: each capacity with its count of nodes.
        self._eligible: dict[_Rules, tuple[Node, ...]] = {((), NO_FEATURES): self.nodes}
        self._kinds: dict[_Rules, list[tuple[Mapping[str, int], int]]] = {}
        # Whether this process checks the backend's decisions (see the module docstring).
        self.checks = not getattr(backend, "checks_decisions", False)
        self._fits: dict[tuple[int, tuple[tuple[str, int], ...], _Rules], bool] = {}
        self.decisions = 0
        self.finished = 0
        self.first_submit: int | None = None
        self.last_end: int | None = None
        self._bar: tqdm[None] | None = None
        self._last_t = 0  # the last time point

    # -- the event loop ----------------------------------------------------------------------

    def run(self, jobs: Iterable[TraceJob]) -> ReplayResult:
        started = time.perf_counter()
        source: Iterator[TraceJob] = iter(jobs)
        upcoming = next(source, None)
        pending: _Pending | None = None
        wake: int | None = None
        changed = False
        stalls = window_wakes = 0
        if self.options.progress:  # (tqdm loaded only for a bar)
            from tqdm import tqdm

            self._bar = tqdm(total=self.options.expected_jobs, unit="job",
                             desc=self.options.progress_label, leave=False, mininterval=0.5)
        try:
            while True:
                window_end = (self.calendar.next_end(self._last_t)
                              if self.calendar is not None and self.queue else None)
                t = self._next_event(upcoming, pending, wake, window_end)
                if t is None:
                    break
                self._last_t = t
                if window_end is not None and window_end <= t:
                    changed = True  # a window ended: what it held back may start
                if self._release(t):
                    changed = True
                while upcoming is not None and upcoming.submit <= t:
                    if self._admit(upcoming):
                        changed = True
                    upcoming = next(source, None)
                if pending is not None and pending.at <= t:
                    self._apply(pending.decision, t)
                    pending = None
                if wake is not None and wake <= t:
                    wake, changed = None, True
                if not (self.queue and changed and pending is None):
                    continue
                changed = False
                if self.options.interrupted is not None and self.options.interrupted():
                    raise ReplayInterrupted(t, self.decisions, self.finished, len(self.queue),
                                            len(self.running))
                decision, delay = self._dispatch(t)
                if delay > 0:
                    pending = _Pending(t + delay, decision)
                else:
                    self._apply(decision, t)
                if (decision.starts or self.running or pending is not None
                        or upcoming is not None or not self.queue):
                    stalls = window_wakes = 0
                    continue
                if self.calendar is not None and self.calendar.next_end(t) is not None:
                    window_wakes += 1  # the next time point is the window's end
                    if window_wakes <= WINDOW_WAKES:
                        continue
                    raise self._stalled(t)
                stalls += 1
                if stalls > self.options.stall_retries:
                    raise self._stalled(t)
                wake = t + 1
            self._flush_completions()
        finally:
            if self._bar is not None:
                self._bar.close()
        return ReplayResult(
            jobs=self.finished,
            decisions=self.decisions,
            first_submit=self.first_submit,
            last_end=self.last_end,
            wall_seconds=time.perf_counter() - started,
        )

    def _next_event(self, upcoming: TraceJob | None, pending: _Pending | None,
                    wake: int | None, window_end: int | None = None) -> int | None:
        """The next instant something happens: a submission, a job's end, a delayed decision
        applied, a wake-up after a stall, a window's end while jobs wait; None when nothing
        will."""
        candidates = [
            x for x in (
                upcoming.submit if upcoming is not None else None,
                self._ends[0][0] if self._ends else None,
                pending.at if pending is not None else None,
                wake, window_end,
            ) if x is not None
        ]
        return min(candidates) if candidates else None

    def _stalled(self, t: int) -> SimulationError:
        """The error of a dispatcher that starts nothing on an idle system, time after time."""
        ids = ", ".join(list(self.queue)[:5])
        return SimulationError(
            f"stalled at t={t}: the dispatcher starts none of {len(self.queue)} "
            f"queued jobs ({ids}, ...) on an idle system"
        )

    # -- steps -------------------------------------------------------------------------------

    def _release(self, t: int) -> bool:
        released = False
        while self._ends and self._ends[0][0] <= t:
            _, _, job_id = heapq.heappop(self._ends)
            live = self.running.pop(job_id)
            self._changes.end(job_id)
            assert live.running is not None
            if self.checks:
                self.facts.release(live.running.units)
            released = True
            self._finish(live)
        return released

    def _finish(self, live: _Live) -> None:
        job, running = live.job, live.running
        assert running is not None
        nodes = tuple(dict.fromkeys(u.node_id for u in running.units))
        self.observer.job_finished(
            JobRecord(
                id=job.id, user=job.user, submit=job.submit, start=running.start_time,
                end=live.end, requested_time=job.requested_time, predicted=live.predicted,
                killed=job.killed, units=live.units, partitions=live.queued.partitions,
                cores=live.units * live.request.get("core", 0), nodes=nodes,
                first_reported_start=live.first_reported,
                first_reported_promised=live.first_reported_promised,
                first_promised_start=live.first_promised,
                first_promised_likely_start=live.first_promised_likely,
                promise_moves=len(live.moved_later),
                promise_moved_later_seconds=sum(seconds for seconds, _ in live.moved_later),
                promise_move_reasons=tuple(reason for _, reason in live.moved_later),
            )
        )
        self._completions.append(
            JobCompletion(
                job_id=job.id, user=job.user, name=job.executable, queue=job.queue,
                units=live.units, unit_request=live.request,
                requested_time=job.requested_time, start_time=running.start_time,
                end_time=live.end,
            )
        )
        self.finished += 1
        self.last_end = live.end if self.last_end is None else max(self.last_end, live.end)
        if self._bar is not None:
            self._bar.update(1)

    def _admit(self, job: TraceJob) -> bool:
        if self.first_submit is None:
            self.first_submit = job.submit
        if job.id in self.queue or job.id in self.running:
            raise SimulationError(f"job id {job.id} (line {job.line}) is already in the system")
        units, request = self.rule.request(job, self.types)
        partitions = self._partitions_of(job)
        if partitions is None:
            self.observer.job_dropped(NO_PARTITION)
            return False
        rules = (partitions, self.system.job_features(partitions, job.swf_queue))
        key = (units, tuple(sorted(request.items())), rules)
        fits = self._fits.get(key)
        if fits is None:
            fits = self._fits[key] = units_fitting(self._eligible_kinds(rules),
                                                   request) >= units
        if not fits:
            self.observer.job_dropped(NEVER_FITS)
            return False
        if self._never_between_windows(job.requested_time, rules):
            self.observer.job_dropped(NEVER_BETWEEN_WINDOWS)
            return False
        queued = QueuedJob(
            id=job.id, user=job.user, name=job.executable, queue=job.queue,
            submit_time=job.submit, units=units, unit_request=request,
            requested_time=job.requested_time,
            actual_duration=max(1, job.duration) if self.options.oracle else None,
            priority=self.system.job_priority(partitions, job.swf_queue, job.user),
            partitions=partitions, required_features=rules[1][0],
            feature_alternatives=rules[1][1],
        )
        self.queue[job.id] = _Live(job, units, request, queued)
        self._changes.submit(queued)
        return True

    def _partitions_of(self, job: TraceJob) -> tuple[str, ...] | None:
        """The partitions a job may run in: its SWF partition's, the system's default one for
        an unknown partition (-1), any node on a system that maps no SWF partition; None for
        an SWF partition the system does not map."""
        mapped = self.system.swf_partitions
        if not mapped:
            return ()
        number = job.swf_partition
        if number < 0:
            default = self.system.default_partition
            return (default,) if default else ()
        name = mapped.get(number)
        return None if name is None else (name,)

    def _eligible_nodes(self, rules: _Rules) -> tuple[Node, ...]:
        nodes = self._eligible.get(rules)
        if nodes is None:
            (partitions, (required, alternatives)) = rules
            probe = QueuedJob("", "", "", "", 0, 1, {}, 1, partitions=partitions,
                              required_features=required, feature_alternatives=alternatives)
            nodes = self._eligible[rules] = tuple(n for n in self.nodes if probe.may_use(n))
        return nodes

    def _eligible_kinds(self, rules: _Rules) -> list[tuple[Mapping[str, int], int]]:
        kinds = self._kinds.get(rules)
        if kinds is None:
            counted = Counter(tuple(sorted(n.capacity.items()))
                              for n in self._eligible_nodes(rules))
            kinds = self._kinds[rules] = [(dict(c), k) for c, k in counted.items()]
        return kinds

    def _never_between_windows(self, requested: int, rules: _Rules) -> bool:
        """Whether a recurring window that admits nobody covers every node the job may use
        and leaves it too short a gap: it could never start."""
        if self.calendar is None:
            return False
        eligible = {n.id for n in self._eligible_nodes(rules)}
        return any(rule.period and rule.maintenance and requested > rule.period - rule.length
                   and eligible <= set(rule.nodes) for rule in self.calendar.rules)

    def _queued_job(self, job_id: str) -> QueuedJob | None:
        live = self.queue.get(job_id)
        return None if live is None else live.queued

    def _snapshot(self, t: int) -> Snapshot:
        running = tuple(live.running for live in self.running.values() if live.running)
        queued = tuple(live.queued for live in self.queue.values())
        return Snapshot(time=t, nodes=self.nodes, running=running, queued=queued,
                        windows=self.windows)

    def _dispatch(self, t: int) -> tuple[Decision, int]:
        """One decision call; returns the checked decision and the charged delay (s)."""
        self._flush_completions()
        if self.calendar is not None:
            windows = self.calendar.at(t)
            if windows != self.windows:
                self.windows = windows
                self._changes.set_windows(windows)
        change = self._changes.take(t)
        begin = self.clock()
        answer = self.backend.decide(change, lambda: self._snapshot(t))
        roundtrip = self.clock() - begin
        decision = answer.decision
        problems = list(answer.problems)
        if self.checks:  # the echoed time included
            self.facts.time = t
            problems.extend(check_decision_against(self.facts, decision))
        elif decision.time != t:
            problems.append(f"decision time {decision.time} differs from t={t}")
        if problems:
            raise InvalidDecisionError(t, problems)
        self.decisions += 1
        self._note_expected_starts(answer.expected_starts)
        report = answer.report
        self.observer.decision_made(
            DecisionRecord(
                time=t, queue_length=len(self.queue), running_jobs=len(self.running),
                dispatcher=report.dispatcher, predictor=report.predictor,
                profile=report.profile, attempts=report.attempts, status=report.status,
                variables=report.variables, constraints=report.constraints,
                started=len(decision.starts), decision_seconds=report.decision_seconds,
                roundtrip_seconds=roundtrip, fallback_reason=report.fallback_reason,
            )
        )
        delay = math.ceil(roundtrip) if self.options.charge_decision_time else 0
        return decision, delay

    def _note_expected_starts(self, reported: Iterable[ExpectedStart]) -> None:
        """Each waiting job's first reported start, first promise with the likely start
        beside it, and its promise's moves later (jobs.csv)."""
        queue = self.queue
        for expected in reported:
            live = queue.get(expected.job_id)
            if live is None:
                continue  # not queued here: the answer's check names it
            if live.first_reported is None:
                live.first_reported = expected.start
                live.first_reported_promised = expected.promised
            if expected.promised and live.first_promised is None:
                live.first_promised = expected.start
                live.first_promised_likely = expected.likely
            if expected.moved_later > 0:
                live.moved_later.append((expected.moved_later, expected.move_reason))

    def _apply(self, decision: Decision, t: int) -> None:
        for start in decision.starts:
            live = self.queue.pop(start.job_id)
            live.predicted = start.expected_duration
            live.running = RunningJob(
                id=live.job.id, user=live.job.user, name=live.job.executable, start_time=t,
                requested_time=live.job.requested_time,
                expected_duration=start.expected_duration if start.expected_duration > 0
                else None,
                units=tuple(UnitAllocation(n, live.request) for n in start.nodes),
            )
            # A zero-second job holds its resources for one second (as the predictors assume),
            # so that it does not end at the very time point it started in.
            live.end = t + max(1, live.job.duration)
            self.running[live.job.id] = live
            self._changes.start(live.running)
            if self.checks:
                self.facts.hold(live.running.units)
            self._seq += 1
            heapq.heappush(self._ends, (live.end, self._seq, live.job.id))

    def _flush_completions(self) -> None:
        if self._completions:
            batch, self._completions = self._completions, []
            self.backend.report_completions(batch)
