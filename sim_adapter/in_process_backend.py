"""DispatchBackend over the service's decision pipeline in this process (no gRPC, no protobuf
per decision): server/in_process.py.

The first decision opens an in-process session with the whole snapshot, taken in and checked as
OpenSession takes it in (its options from the replay's request template, resolved once); each
later one hands the session the simulator's change since the previous call. The decisions are
those of the gRPC path's session; campaigns and benchmarks use this path because it costs what
the simulator and the dispatcher cost, not what the transport costs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from hpcdispatch.catalog import dispatcher_name, dispatcher_names, enum_value, predictor_name
from hpcdispatch.proto_convert import snapshot_to_pb
from hpcdispatch.server.in_process import InProcessDecision, InProcessService, InProcessSession
from hpcdispatch.snapshot import JobCompletion, Snapshot
from hpcdispatch.v1 import dispatcher_pb2 as pb

from .backend import Answer, AnswerReport, ExpectedStart, ServiceFacts, StateChange, enum_name

# The edge's: a number naming no reason is unspecified (the values, looked up once).
_MOVE_REASONS = frozenset(pb.PromiseMoveReason.values())


class LocalService:
    """The service in this process, as a replay's target: what it says of itself, and a
    backend per replay. `overrides`: ServerConfig keys over the defaults."""

    def __init__(self, **overrides: Any) -> None:
        self.service = InProcessService(**overrides)

    def describe(self) -> ServiceFacts:
        d = self.service.defaults
        return ServiceFacts(dispatcher_name(d.default_dispatcher) or "",
                            predictor_name(d.default_predictor) or "", d.default_profile,
                            d.version, d.profiles, dispatcher_names())

    def backend(self, template: pb.DispatchRequest) -> InProcessBackend:
        return InProcessBackend(self.service, template)


class InProcessBackend:
    """The replay's decisions through `service` (one session per backend).

    Each decision is checked by the service's pipeline, in this process, against the
    session's state, which the simulator's changes keep equal to its own
    (`checks_decisions`): the simulator does not check it a second time. Completions are
    reported only while the session's predictor learns from them (walltime and oracle do
    not; each replay has a knowledge base of its own, which nothing else reads)."""

    checks_decisions = True

    def __init__(self, service: InProcessService, template: pb.DispatchRequest) -> None:
        self.service = service
        self.template = template
        self.session: InProcessSession | None = None
        self._learns = True

    def decide(self, change: StateChange, whole: Callable[[], Snapshot]) -> Answer:
        if self.session is None:
            request = pb.DispatchRequest()
            request.CopyFrom(self.template)
            snapshot_to_pb(whole(), request)
            self.session = self.service.open(request)
            self._learns = self.session.learns_from_completions()
        else:
            self.session.update(change.time, change.ended, change.cancelled, change.submitted,
                                change.started, change.windows)
        return _answer(self.session.decide())

    def report_completions(self, completions: Sequence[JobCompletion]) -> None:
        if self.session is not None and not self._learns:
            return
        self.service.learn(self.template.cluster, completions)

    def close(self) -> None:
        self.session = None


def _answer(decided: InProcessDecision) -> Answer:
    result = decided.result
    outcome = result.outcome
    expected = tuple(_expected_start(decided, i) for i in outcome.expected_starts)
    return Answer(
        result.decision,
        AnswerReport.of(enum_value(decided.dispatcher, pb.Dispatcher),
                        enum_value(decided.predictor, pb.Predictor), decided.profile,
                        len(outcome.attempts), decided.status, outcome.variables,
                        outcome.constraints, decided.seconds, result.fallback_reason,
                        dispatcher_name(decided.dispatcher) or "",
                        predictor_name(decided.predictor) or ""),
        expected_starts=expected,
    )


def _expected_start(decided: InProcessDecision, i: int) -> ExpectedStart:
    """Job i's expected start as the gRPC path's answer carries it (the edge's report,
    rpc/decision_front.py; adapter.py `expected_start_of` reads it back)."""
    outcome, problem = decided.result.outcome, decided.result.problem
    job_id, t = problem.jobs[i].id, problem.t
    start, promised = outcome.expected_starts[i]
    if not promised:
        return ExpectedStart(job_id, t + start, False)
    likely = outcome.likely_starts.get(i)
    moved = max(outcome.promises_moved.get(i, 0), 0)
    reason = outcome.promise_move_reasons.get(i, 0)
    said = enum_name(pb.PromiseMoveReason, pb.PromiseMoveReason.ValueType(
        reason if reason in _MOVE_REASONS else 0), "PROMISE_MOVE_REASON_")
    return ExpectedStart(job_id, t + start, True,
                         None if likely is None else t + min(likely, start), moved,
                         said if moved else "")
