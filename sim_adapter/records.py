"""What a replay records: one row per finished job and one per dispatching decision."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

BSLD_BOUND = 10  # seconds: the usual bound of the bounded slowdown


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A job that ran: times in seconds on the trace's clock."""

    id: str
    user: str
    submit: int
    start: int
    end: int
    requested_time: int
    predicted: int  # d_i the dispatcher used when it started the job (0 = not reported)
    killed: bool  # ran into its requested time
    units: int
    cores: int  # cores held, all units together
    nodes: tuple[str, ...]  # distinct nodes, in unit order
    # The start the first decision that reported one gave it while it waited
    # (DecisionReport.expected_starts), and whether that was a promise; None: never reported.
    first_reported_start: int | None = None
    first_reported_promised: bool = False
    # Its first promised start (the first report, or a later one for a job first given an
    # estimate); None: never promised.
    first_promised_start: int | None = None
    # The likely start reported beside that first promise (the predictor's plan); None: never
    # promised, or promised without a likely start.
    first_promised_likely_start: int | None = None
    # Its promise's moves later while it waited (a node down, a job past its limit): how many,
    # their seconds in all, and their reasons in order (PromiseMoveReason names, lower case).
    promise_moves: int = 0
    promise_moved_later_seconds: int = 0
    promise_move_reasons: tuple[str, ...] = ()
    partitions: tuple[str, ...] = ()  # the partitions it was allowed (none: any node)

    @property
    def wait(self) -> int:
        return self.start - self.submit

    @property
    def run(self) -> int:
        return self.end - self.start

    @property
    def slowdown(self) -> float:
        """(wait + run) / run as in the papers; a zero-length job counts as 1 s."""
        run = max(self.run, 1)
        return (self.wait + run) / run

    @property
    def bounded_slowdown(self) -> float:
        return max((self.wait + self.run) / max(self.run, BSLD_BOUND), 1.0)


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """One Dispatch call and how the service reached its answer."""

    time: int
    queue_length: int
    running_jobs: int
    dispatcher: str
    predictor: str
    profile: str
    attempts: int
    status: str
    variables: int
    constraints: int
    started: int
    decision_seconds: float  # the service's own wall time (DecisionReport.total_seconds)
    roundtrip_seconds: float  # wall time of the call as the simulator saw it
    fallback_reason: str


class ReplayObserver(Protocol):
    """Receives what the simulator records (see `outputs.RunRecorder`)."""

    def job_finished(self, record: JobRecord) -> None: ...

    def decision_made(self, record: DecisionRecord) -> None: ...

    def job_dropped(self, reason: str) -> None: ...
