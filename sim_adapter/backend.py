"""The seam between the simulator and a dispatching service, free of the wire format.

At each decision the simulator hands its backend what changed since the previous call
(`StateChange`: jobs ended, submitted, started) and a way to build the whole state
(`Snapshot`) when the backend needs it. A backend that keeps the cluster's state itself (the
service's session, called in-process) applies the change; one that sends whole snapshots or
computes its own deltas (the gRPC client's session) builds the snapshot. Either answers with
the decision and how it was reached (`Answer`), and learns completed jobs through
`report_completions`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from hpcdispatch.catalog import (
    CP_DISPATCHER_NAMES,
    DISPATCHER_NAMES,
    reported_dispatcher,
    reported_predictor,
)
from hpcdispatch.snapshot import (
    Decision,
    JobCompletion,
    QueuedJob,
    RunningJob,
    Snapshot,
    UnavailabilityWindow,
)
from hpcdispatch.v1 import dispatcher_pb2 as pb


@dataclass(frozen=True, slots=True)
class StateChange:
    """What changed since the previous decision call (at the first call: the whole state)."""

    time: int  # t of this call
    ended: tuple[str, ...]  # running jobs that finished (ids)
    cancelled: tuple[str, ...]  # queued jobs that left the queue without running (ids)
    submitted: tuple[QueuedJob, ...]  # jobs that entered the queue
    started: tuple[RunningJob, ...]  # queued jobs that started (with their d_i)
    # The unavailability windows from now on, all of them; None: the same as before.
    windows: tuple[UnavailabilityWindow, ...] | None = None


@dataclass(slots=True)
class ChangeLog:
    """The changes since the last `take`, kept as the simulator makes them, written as the
    difference of the two states (what a snapshot-diffing client would send): a job that
    started and ended between two calls was queued at the first and is gone at the second, so
    it left the queue without running (`cancelled`)."""

    submitted: dict[str, QueuedJob] = field(default_factory=dict)
    started: dict[str, RunningJob] = field(default_factory=dict)
    ended: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    windows: tuple[UnavailabilityWindow, ...] | None = None

    def set_windows(self, windows: tuple[UnavailabilityWindow, ...]) -> None:
        """The windows from now on replace all of them."""
        self.windows = windows

    def submit(self, job: QueuedJob) -> None:
        self.submitted[job.id] = job

    def start(self, job: RunningJob) -> None:
        """A job the backend saw queued (it decided to start it) starts."""
        self.started[job.id] = job

    def end(self, job_id: str) -> None:
        if self.started.pop(job_id, None) is None:
            self.ended.append(job_id)
        else:
            self.cancelled.append(job_id)

    def take(self, t: int) -> StateChange:
        change = StateChange(t, tuple(self.ended), tuple(self.cancelled),
                             tuple(self.submitted.values()), tuple(self.started.values()),
                             self.windows)
        self.submitted, self.started, self.ended, self.cancelled = {}, {}, [], []
        self.windows = None
        return change


@dataclass(frozen=True, slots=True)
class AnswerReport:
    """How the service reached a decision (the contract's DecisionReport, names lower case)."""

    dispatcher: str  # e.g. "easy", "pcp20"
    predictor: str  # e.g. "walltime"
    profile: str
    attempts: int  # solver attempts (restart policy)
    status: str  # e.g. "optimal", "feasible", "fallback"
    variables: int
    constraints: int
    decision_seconds: float  # the service's own wall time of the decision
    fallback_reason: str

    @staticmethod
    def of(dispatcher: int, predictor: int, profile: str, attempts: int, status: int,
           variables: int, constraints: int, decision_seconds: float,
           fallback_reason: str, dispatcher_name: str = "",
           predictor_name: str = "") -> AnswerReport:
        """The report from the contract's enum values (pb.Dispatcher, pb.Predictor,
        pb.SolveStatus) and names: the dispatcher and predictor by their registered names
        (`data-driven`, `easy-sjf`, a plugin's), the enum value's name from a server older
        than names; the profile only for a dispatcher that uses one (a baseline ignores it)."""
        dispatcher_text = reported_dispatcher(dispatcher, dispatcher_name) or str(dispatcher)
        uses_profile = dispatcher_text in CP_DISPATCHER_NAMES or \
            dispatcher_text not in DISPATCHER_NAMES
        return AnswerReport(
            dispatcher_text, reported_predictor(predictor, predictor_name) or str(predictor),
            profile if uses_profile else "", attempts,
            enum_name(pb.SolveStatus, status, "SOLVE_STATUS_"), variables, constraints,
            decision_seconds, fallback_reason)


@dataclass(frozen=True, slots=True)
class ExpectedStart:
    """A waiting job's start as a decision reported it (DecisionReport.expected_starts): what
    `squeue --start` would show its user."""

    job_id: str
    start: int  # seconds, on the trace's clock (after the decision's t)
    # A promise (a guarantee from requested times: the job starts no later unless a node goes
    # down or a job runs past its limit), else an estimate (the likely start of the plan).
    promised: bool
    # Beside a promise: its likely start, seconds on the trace's clock (the predictor's plan);
    # None for an estimate (`start` is its likely start) or when the dispatcher gave none.
    likely: int | None = None
    moved_later: int = 0  # seconds this decision moved the promise later; 0: kept
    # Why it moved (a PromiseMoveReason's name without its prefix, in lower case:
    # "node_unavailable", "ran_past_limit", ...); "" when it did not move.
    move_reason: str = ""

    @property
    def likely_start(self) -> int:
        """The likely start: the one beside a promise, else the estimate itself."""
        return self.start if self.likely is None else self.likely


@dataclass(frozen=True, slots=True)
class Answer:
    """A decision as the backend received it; `problems`: what the backend found wrong in the
    answer itself (a time or unit amounts that differ from what was asked), empty when none;
    `expected_starts`: the waiting jobs' starts the decision reported (none for a dispatcher
    that makes no plan)."""

    decision: Decision
    report: AnswerReport
    problems: tuple[str, ...] = ()
    expected_starts: tuple[ExpectedStart, ...] = ()


@dataclass(frozen=True, slots=True)
class ServiceFacts:
    """What the service says of itself (DescribeService): its defaults, version, profiles."""

    default_dispatcher: str  # by name ("pcp20", or a plugin's); "" when not told
    default_predictor: str  # by name ("data-driven", ...); "" when not told
    default_profile: str
    version: str
    profiles: tuple[str, ...]  # the search profiles' names
    dispatchers: tuple[str, ...] = ()  # every dispatcher offered, by name; () when not told


class DispatchBackend(Protocol):
    """The dispatching service as the simulator sees it: decide, and learn completions.

    A backend may say `checks_decisions = True` when every decision it answers was checked in
    the simulator's own process against the state its changes made (the in-process service):
    the simulator then does not check it again."""

    def decide(self, change: StateChange, whole: Callable[[], Snapshot]) -> Answer: ...

    def report_completions(self, completions: Sequence[JobCompletion]) -> None: ...


def enum_name(enum: object, value: int, prefix: str) -> str:
    """pb.Dispatcher value DISPATCHER_EASY -> "easy" (the number, for a value not named)."""
    try:
        name: str = enum.Name(value)  # type: ignore[attr-defined]
    except ValueError:
        return str(value)
    return name.removeprefix(prefix).lower()
