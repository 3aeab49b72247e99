"""Event-driven trace replay against a dispatcher behind the gRPC contract (AccaSim's rules).

At each time point the simulator first releases finished jobs, then admits submissions, then,
if jobs are queued and something changed since the last call, asks the dispatcher once with
the whole state and applies its decision. Jobs hold their resources for their actual run
time and are killed at their requested time. Every decision is re-checked with
`hpcdispatch.decision_check.check_decision` (and against the request's own amounts); an
invalid one stops the replay with `InvalidDecisionError`.

Running jobs are sent with the d_i the service announced when it started them
(JobStart.expected_duration), so a prediction is fixed for a job's life. Completions are
reported to the service (ReportCompletions) before the next Dispatch call, so the predictors
learn in simulated-time order. With `charge_decision_time`, the wall time of each call,
rounded up to whole seconds, passes in simulated time before the decision takes effect; no
other call is made meanwhile, while releases and submissions go on.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from tqdm import tqdm

from hpcdispatch.decision_check import check_decision
from hpcdispatch.proto_convert import decision_from_pb, snapshot_to_pb
from hpcdispatch.snapshot import (
    Decision,
    QueuedJob,
    RunningJob,
    Snapshot,
    UnitAllocation,
)
from hpcdispatch.systems import System
from hpcdispatch.v1 import dispatcher_pb2 as pb

from .records import DecisionRecord, JobRecord, ReplayObserver
from .swf import TraceJob
from .workload import UnitRule, units_fitting_empty

NEVER_FITS = "never fits the system"


class DispatchBackend(Protocol):
    """The dispatching service as the simulator sees it: the two calls of the contract."""

    def dispatch(self, request: pb.DispatchRequest) -> pb.DispatchResponse: ...

    def report_completions(self, completions: Sequence[pb.JobCompletion]) -> None: ...


class SimulationError(RuntimeError):
    """The replay cannot go on."""


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
    stall_retries: int = 3  # calls at t+1, t+2, ... before an idle-system stall is an error


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
        template: pb.DispatchRequest,
        observer: ReplayObserver,
        options: ReplayOptions | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.system = system
        self.rule = rule
        self.backend = backend
        self.template = template
        self.observer = observer
        self.options = options or ReplayOptions()
        self.clock = clock  # wall clock of the calls (charged with charge_decision_time)
        self.nodes = system.nodes()
        self.types = frozenset(r for n in self.nodes for r in n.capacity)
        self.queue: dict[str, _Live] = {}
        self.running: dict[str, _Live] = {}
        self._ends: list[tuple[int, int, str]] = []
        self._seq = 0
        self._completions: list[pb.JobCompletion] = []
        self._fits: dict[tuple[int, tuple[tuple[str, int], ...]], bool] = {}
        self.decisions = 0
        self.finished = 0
        self.first_submit: int | None = None
        self.last_end: int | None = None
        self._bar: tqdm[None] | None = None

    # -- the event loop ----------------------------------------------------------------------

    def run(self, jobs: Iterable[TraceJob]) -> ReplayResult:
        started = time.perf_counter()
        source: Iterator[TraceJob] = iter(jobs)
        upcoming = next(source, None)
        pending: _Pending | None = None
        wake: int | None = None
        changed = False
        stalls = 0
        self._bar = tqdm(total=self.options.expected_jobs, unit="job", desc="replay",
                         disable=not self.options.progress, leave=False, mininterval=0.5)
        try:
            while True:
                candidates = [
                    x for x in (
                        upcoming.submit if upcoming is not None else None,
                        self._ends[0][0] if self._ends else None,
                        pending.at if pending is not None else None,
                        wake,
                    ) if x is not None
                ]
                if not candidates:
                    break
                t = min(candidates)
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
                decision, delay = self._dispatch(t)
                if delay > 0:
                    pending = _Pending(t + delay, decision)
                else:
                    self._apply(decision, t)
                if (decision.starts or self.running or pending is not None
                        or upcoming is not None or not self.queue):
                    stalls = 0
                    continue
                stalls += 1
                if stalls > self.options.stall_retries:
                    ids = ", ".join(list(self.queue)[:5])
                    raise SimulationError(
                        f"stalled at t={t}: the dispatcher starts none of {len(self.queue)} "
                        f"queued jobs ({ids}, ...) on an idle system"
                    )
                wake = t + 1
            self._flush_completions()
        finally:
            self._bar.close()
        return ReplayResult(
            jobs=self.finished,
            decisions=self.decisions,
            first_submit=self.first_submit,
            last_end=self.last_end,
            wall_seconds=time.perf_counter() - started,
        )

    # -- steps -------------------------------------------------------------------------------

    def _release(self, t: int) -> bool:
        released = False
        while self._ends and self._ends[0][0] <= t:
            _, _, job_id = heapq.heappop(self._ends)
            live = self.running.pop(job_id)
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
                killed=job.killed, units=live.units,
                cores=live.units * live.request.get("core", 0), nodes=nodes,
            )
        )
        self._completions.append(
            pb.JobCompletion(
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
        key = (units, tuple(sorted(request.items())))
        fits = self._fits.get(key)
        if fits is None:
            fits = self._fits[key] = units_fitting_empty(self.system, request) >= units
        if not fits:
            self.observer.job_dropped(NEVER_FITS)
            return False
        queued = QueuedJob(
            id=job.id, user=job.user, name=job.executable, queue=job.queue,
            submit_time=job.submit, units=units, unit_request=request,
            requested_time=job.requested_time,
            actual_duration=max(1, job.duration) if self.options.oracle else None,
        )
        self.queue[job.id] = _Live(job, units, request, queued)
        return True

    def _snapshot(self, t: int) -> Snapshot:
        running = tuple(live.running for live in self.running.values() if live.running)
        queued = tuple(live.queued for live in self.queue.values())
        return Snapshot(time=t, nodes=self.nodes, running=running, queued=queued)

    def _dispatch(self, t: int) -> tuple[Decision, int]:
        """One Dispatch call; returns the checked decision and the charged delay (s)."""
        self._flush_completions()
        snapshot = self._snapshot(t)
        request = pb.DispatchRequest()
        request.CopyFrom(self.template)
        snapshot_to_pb(snapshot, request)
        begin = self.clock()
        response = self.backend.dispatch(request)
        roundtrip = self.clock() - begin
        decision = decision_from_pb(response)
        problems = self._problems(snapshot, response, decision)
        if problems:
            raise InvalidDecisionError(t, problems)
        self.decisions += 1
        report = response.report
        self.observer.decision_made(
            DecisionRecord(
                time=t, queue_length=len(snapshot.queued), running_jobs=len(snapshot.running),
                dispatcher=_enum_name(pb.Dispatcher, report.dispatcher, "DISPATCHER_"),
                predictor=_enum_name(pb.Predictor, report.predictor, "PREDICTOR_"),
                profile=report.profile, attempts=len(report.attempts),
                status=_enum_name(pb.SolveStatus, report.status, "SOLVE_STATUS_"),
                variables=report.model_variables, constraints=report.model_constraints,
                started=len(decision.starts), decision_seconds=report.total_seconds,
                roundtrip_seconds=roundtrip, fallback_reason=report.fallback_reason,
            )
        )
        delay = math.ceil(roundtrip) if self.options.charge_decision_time else 0
        return decision, delay

    def _problems(
        self, snapshot: Snapshot, response: pb.DispatchResponse, decision: Decision
    ) -> list[str]:
        problems = []
        if response.time != snapshot.time:
            problems.append(f"response time {response.time} differs from t={snapshot.time}")
        problems.extend(check_decision(snapshot, decision))
        for start in response.starts:
            live = self.queue.get(start.job_id)
            if live is None:
                continue  # reported by check_decision
            for unit in start.units:
                if dict(unit.amounts) != live.request:
                    problems.append(
                        f"job {start.job_id!r} unit on {unit.node_id!r} holds "
                        f"{dict(unit.amounts)} instead of its request {live.request}"
                    )
                    break
        return problems

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
            self._seq += 1
            heapq.heappush(self._ends, (live.end, self._seq, live.job.id))

    def _flush_completions(self) -> None:
        if self._completions:
            batch, self._completions = self._completions, []
            self.backend.report_completions(batch)


def _enum_name(enum: object, value: int, prefix: str) -> str:
    try:
        name: str = enum.Name(value)  # type: ignore[attr-defined]
    except ValueError:
        return str(value)
    return name.removeprefix(prefix).lower()
