"""The service's decisions in the caller's own process, without the wire (for trace replays).

A replay that does not need to exercise the gRPC edge (campaigns, benchmarks) decides through
the rooms a session call goes through, minus the transport:

- the opening snapshot is taken in as OpenSession takes it in (`SnapshotIntake.session`:
  checked and converted once, its options resolved once);
- the session's state (sessions/state.py) is then changed by the caller's deltas, as
  UpdateSession changes it once its delta is accepted;
- every decision is made and checked by the pipeline (`decide_on`) on the state's situation,
  with the predictors of the knowledge base that completions teach, as ReportCompletions
  teaches it, under the search options and deadline a session call would have.

What it leaves out is what only the wire needs: a protobuf request and answer per decision,
the delta's own validation (the caller is this process), threads and admission, and the
metrics. The decisions are the gRPC session's, which
tests/server/in_process/test_in_process_replay.py checks replay by replay.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from hpcdispatch import __version__
from hpcdispatch.catalog import dispatcher_kind, predictor_kind
from hpcdispatch.snapshot import JobCompletion, QueuedJob, RunningJob, UnavailabilityWindow
from hpcdispatch.v1 import dispatcher_pb2 as pb

from .config import ServerConfig, load_config
from .core_wire import solve_status_to_pb
from .domain.duration_predictor import depends_on_job_only
from .domain.profiles import DEFAULT_PROFILE, PROFILES
from .intake.decision_options import DecisionOptions
from .intake.snapshot_intake import SnapshotIntake
from .intake.validation import Violation
from .pipeline import DecisionResult, completion_of, decide_on, open_predictors
from .sessions.heap import freeze_long_lived
from .sessions.state import SessionState


class InvalidSnapshot(ValueError):
    """The opening snapshot breaks the contract; `violations` name each field."""

    def __init__(self, violations: list[Violation]) -> None:
        first = violations[0]
        super().__init__(f"invalid snapshot: {len(violations)} problem(s), first: "
                         f"{first.field}: {first.description}")
        self.violations = violations


@dataclass(frozen=True, slots=True)
class Defaults:
    """What DescribeService says of the service's defaults (its fields' names)."""

    default_dispatcher: int  # pb.Dispatcher
    default_predictor: int  # pb.Predictor
    default_profile: str
    version: str
    profiles: tuple[str, ...]  # the search profiles' names


@dataclass(frozen=True, slots=True)
class InProcessDecision:
    """A checked decision and how it was reached (the answer's report, without the wire)."""

    result: DecisionResult
    dispatcher: int  # pb.Dispatcher: the one asked for, or the service's default
    predictor: int  # pb.Predictor
    profile: str
    seconds: float  # wall time of the decision

    @property
    def status(self) -> int:
        """The decision's status as the answer's report says it (pb.SolveStatus)."""
        return solve_status_to_pb(self.result.outcome.status)


class InProcessService:
    """The service's predictors, intake and defaults, serving in-process sessions."""

    def __init__(self, config: ServerConfig | None = None, **overrides: Any) -> None:
        """`config`, else the defaults (no file, no environment), with `overrides` (keys)."""
        base = config if config is not None else load_config(env={})
        self.config = dataclasses.replace(base, **overrides)
        if self.config.default_profile not in PROFILES:
            raise ValueError(f"unknown default profile {self.config.default_profile!r}")
        self.predictors = open_predictors(store_path=self.config.predictor_store,
                                          limits=self.config.knowledge_base_limits())
        self.intake = SnapshotIntake(self.config, self.predictors.kinds)
        self.defaults = Defaults(
            default_dispatcher=dispatcher_kind(self.config.default_dispatcher),
            default_predictor=predictor_kind(self.config.default_predictor),
            default_profile=self.config.default_profile or DEFAULT_PROFILE,
            version=__version__,
            profiles=tuple(PROFILES),
        )

    def open(self, request: pb.DispatchRequest) -> InProcessSession:
        """A session on the whole snapshot `request`, whose options every decision uses;
        raises InvalidSnapshot as OpenSession answers INVALID_ARGUMENT."""
        intake = self.intake.session(request)
        if intake.violations:
            raise InvalidSnapshot(intake.violations)
        assert intake.snapshot is not None and intake.options is not None
        state = SessionState(intake.options.cluster, intake.snapshot, intake.nodes)
        freeze_long_lived()  # as the service does once a session opens (sessions/heap.py)
        return InProcessSession(self, state, intake.options)

    def learn(self, cluster: str, completions: Sequence[JobCompletion]) -> int:
        """Teach the cluster's predictors (ReportCompletions); returns how many were taken."""
        return self.predictors.learn(cluster or "default",
                                     (completion_of(c) for c in completions))


class InProcessSession:
    """One replay's session: its state, changed by deltas, and its decisions."""

    def __init__(self, service: InProcessService, state: SessionState,
                 options: DecisionOptions) -> None:
        self.service = service
        self.state = state
        self.options = options
        self.dispatcher = options.dispatcher or service.defaults.default_dispatcher
        self.predictor_kind = options.predictor or service.defaults.default_predictor

    def update(self, t: int, ended: Iterable[str], cancelled: Iterable[str],
               submitted: Iterable[QueuedJob], started: Iterable[RunningJob],
               windows: tuple[UnavailabilityWindow, ...] | None = None) -> None:
        """The cluster at `t`: as UpdateSession applies an accepted delta (whole, and never
        failing part-way; there is no call to end in an error before an answer, so nothing
        to resend). `windows`: the unavailability windows from now on, replacing all of them
        (UpdateSessionRequest.windows; an empty tuple clears them); None keeps them."""
        self.state.apply(t, self.state.sequence + 1, (), ended, cancelled, submitted, started,
                         windows)

    def learns_from_completions(self) -> bool:
        """Whether this session's predictor reads what completions teach: one whose d_i
        depends on the job alone (walltime, oracle) does not, so a replay that only decides
        through this session need not report them (`InProcessService.learn`)."""
        predictor = self.service.predictors.predictor(self.options.cluster, self.predictor_kind)
        return not depends_on_job_only(predictor)

    def decide(self) -> InProcessDecision:
        """The checked decision on the state as it is now."""
        received = time.monotonic()
        config = self.service.config
        control = self.options.control(received + config.max_decision_seconds,
                                       config.solver_workers, _never)
        predictor = self.service.predictors.predictor(self.options.cluster, self.predictor_kind)
        result = decide_on(self.state.situation(self.predictor_kind, predictor),
                           self.dispatcher, predictor, control)
        self._hold_promises(result)
        return InProcessDecision(result, self.dispatcher, self.predictor_kind,
                                 control.settings.profile, time.monotonic() - received)

    def _hold_promises(self, result: DecisionResult) -> None:
        """Keep the promises `result` reports with their jobs, as the gRPC session does
        (`SessionService._decide`): the next decision reads each as `Job.promised` (EASY's
        head keeps its place by it, `easy.promise_holder_first`). No token: the state is the
        service's own, never a caller's."""
        problem, t = result.problem, result.problem.t
        self.state.hold_promises((problem.jobs[i].id, t + start, "")
                                 for i, (start, promised) in result.outcome.expected_starts.items()
                                 if promised)


def _never() -> bool:
    """The caller of an in-process decision never goes away while it waits."""
    return False
