"""The thin adapter: the simulator reaches the dispatcher through the gRPC contract.

`service_target(None)` starts a service on loopback for the duration of a `with` block (the
embedded default); `service_target("host:port")` uses an existing one. `GrpcBackend` sends
each decision's state as a DispatchRequest with `hpcdispatch.client.DispatcherClient` and
reports completions to the run's knowledge base (`cluster`), so the service's predictors learn
as the replay goes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from hpcdispatch.catalog import (
    ALLOCATOR_NAMES,
    dispatcher_names,
    predictor_names,
    reported_dispatcher,
    reported_predictor,
    select_dispatcher,
    select_predictor,
)
from hpcdispatch.proto_convert import completion_to_pb, decision_from_pb, snapshot_to_pb
from hpcdispatch.snapshot import JobCompletion, Snapshot
from hpcdispatch.v1 import dispatcher_pb2 as pb

from .backend import (
    Answer,
    AnswerReport,
    ExpectedStart,
    ServiceFacts,
    StateChange,
    enum_name,
)

if TYPE_CHECKING:  # loaded by the gRPC paths alone (replay.py): an in-process replay needs no grpc
    from hpcdispatch.client import DispatcherClient

DEFAULT = "default"  # leave the request field unset: the server's default
# The built-in predictors whose d_i depends on the job alone (their `job_only`,
# server/predictors/): they never read what completions teach.
JOB_ONLY_PREDICTORS = frozenset({pb.PREDICTOR_WALLTIME, pb.PREDICTOR_ORACLE})


# Names as on the command line: the registered names (hpcdispatch.catalog: the built-ins and
# the installed plugins), and "default" for the server's own choice (the request field unset).
DISPATCHERS: tuple[str, ...] = (DEFAULT, *dispatcher_names())  # fcfs, easy, pcp20, ...
PREDICTORS: tuple[str, ...] = (DEFAULT, *predictor_names())  # walltime, last-two, ...
ALLOCATORS: dict[str, int] = {DEFAULT: 0, **ALLOCATOR_NAMES}  # best-fit, first-fit


def _known(names: tuple[str, ...], kind: str, name: str) -> str:
    if name not in names:
        raise ValueError(f"unknown {kind} {name!r}; one of {sorted(names)}")
    return name


@dataclass(frozen=True, slots=True)
class DispatchSettings:
    """The per-run options of every DispatchRequest (names as on the command line)."""

    dispatcher: str = DEFAULT
    predictor: str = DEFAULT
    allocator: str = DEFAULT
    profile: str = ""  # search profile; empty = the server's default
    cluster: str = ""  # knowledge base name; empty = "default"
    # SearchParameters.deterministic: CP search limits in deterministic time, so that a replay
    # gives the same decisions on an idle and on a loaded machine (the service's own default
    # is wall-clock limits).
    deterministic: bool = True
    # SearchParameters fields set on every request (name, value), over the profile's: e.g.
    # ("promise_after_s", 86400), a rung of the promise book's ladder.
    search: tuple[tuple[str, int | bool], ...] = ()

    def template(self) -> pb.DispatchRequest:
        if self.allocator not in ALLOCATORS:
            raise ValueError(f"unknown allocator {self.allocator!r}; one of {sorted(ALLOCATORS)}")
        request = pb.DispatchRequest(
            allocator=cast("pb.Allocator.ValueType", ALLOCATORS[self.allocator]),
            cluster=self.cluster,
        )
        # A built-in by its enum value, a plugin by its name (DispatchRequest.dispatcher_name).
        if _known(DISPATCHERS, "dispatcher", self.dispatcher) != DEFAULT:
            select_dispatcher(request, self.dispatcher)
        if _known(PREDICTORS, "predictor", self.predictor) != DEFAULT:
            select_predictor(request, self.predictor)
        if self.profile:
            request.search.profile = self.profile
        if self.deterministic:
            request.search.deterministic = True
        for name, value in self.search:
            setattr(request.search, name, value)
        return request


def search_override(text: str) -> tuple[str, int | bool]:
    """`KEY=VALUE` as a SearchParameters field and its value (an integer, or true / false);
    ValueError naming what is wrong."""
    key, sep, raw = text.partition("=")
    field = pb.SearchParameters.DESCRIPTOR.fields_by_name.get(key)
    if not sep or field is None or key in ("profile", "deterministic"):
        known = sorted(f.name for f in pb.SearchParameters.DESCRIPTOR.fields
                       if f.name not in ("profile", "deterministic"))
        raise ValueError(f"{text!r}: not KEY=VALUE with KEY one of {', '.join(known)}")
    if field.type == field.TYPE_BOOL:
        if raw not in ("true", "false"):
            raise ValueError(f"{text!r}: {key} is true or false")
        return key, raw == "true"
    try:
        return key, int(raw)
    except ValueError:
        raise ValueError(f"{text!r}: {key} is an integer") from None


def search_label(search: tuple[tuple[str, int | bool], ...]) -> str:
    """The overrides as the run labels show them after the profile: `+key=value` each."""
    return "".join(f"+{name}={str(value).lower()}" for name, value in search)


class GrpcBackend:
    """DispatchBackend over a DispatcherClient: each decision's whole state as a
    DispatchRequest (`template`'s options, the snapshot).

    By default decisions go through a session with unary calls (`DispatcherClient.session`):
    the service keeps the replay's state and each call sends what changed since the previous
    one, resyncing on its own; `full_snapshots` sends every snapshot whole with Dispatch
    instead; `stream` sends the session's calls on a stream (StreamBackend, the replays'
    default, also sends the simulator's changes without diffing whole states). All give the
    same decisions.

    `own_service`: the service is this replay's alone (the embedded one, its knowledge base and
    metrics gone with it); completions are then reported only when the predictor reads them
    (not walltime's or oracle's), as the in-process path does: nobody could read them.
    """

    def __init__(self, client: DispatcherClient, template: pb.DispatchRequest | None = None,
                 timeout: float | None = None, full_snapshots: bool = False,
                 stream: bool = False, own_service: bool = False) -> None:
        self.client = client
        self.template = template if template is not None else pb.DispatchRequest()
        self.timeout = timeout
        self.session = None if full_snapshots else client.session(timeout, stream=stream)
        self.reports_completions = not (own_service
                                        and self.template.predictor in JOB_ONLY_PREDICTORS)

    def dispatch(self, request: pb.DispatchRequest) -> pb.DispatchResponse:
        """One call of the contract with a whole request."""
        if self.session is not None:
            return self.session.decide(request, timeout=self.timeout)
        return self.client.dispatch(request, timeout=self.timeout)

    def request_of(self, snapshot: Snapshot) -> pb.DispatchRequest:
        """The DispatchRequest of a decision on `snapshot`: the template's options, the state."""
        request = pb.DispatchRequest()
        request.CopyFrom(self.template)
        snapshot_to_pb(snapshot, request)
        return request

    def decide(self, change: StateChange, whole: Callable[[], Snapshot]) -> Answer:
        snapshot = whole()
        return answer_of(self.dispatch(self.request_of(snapshot)), snapshot)

    def report_completions(self, completions: Sequence[JobCompletion]) -> None:
        if not self.reports_completions:
            return
        self.client.report_completions([completion_to_pb(c) for c in completions],
                                       cluster=self.template.cluster, timeout=self.timeout)

    def close(self) -> None:
        """Close the session, if any (the service would forget it once idle anyway)."""
        if self.session is not None:
            self.session.close()


def describe_service(client: DispatcherClient, timeout: float) -> ServiceFacts:
    """DescribeService's answer, as the replay reads it."""
    d = client.describe(timeout=timeout)
    return ServiceFacts(reported_dispatcher(d.default_dispatcher, d.default_dispatcher_name),
                        reported_predictor(d.default_predictor, d.default_predictor_name),
                        d.default_profile, d.version, tuple(p.name for p in d.profiles),
                        tuple(d.dispatcher_names))


def answer_of(response: pb.DispatchResponse, snapshot: Snapshot) -> Answer:
    """The wire answer to a decision on `snapshot` (answer_at)."""
    return answer_at(response, snapshot.time, {q.id: q.unit_request for q in snapshot.queued})


def answer_at(response: pb.DispatchResponse, time: int,
              requests: Mapping[str, Mapping[str, int]]) -> Answer:
    """The wire answer as the simulator reads it; a time other than `time`, or unit amounts
    other than the queued jobs' `requests` (per unit, by job id), are its problems."""
    problems = []
    if response.time != time:
        problems.append(f"response time {response.time} differs from t={time}")
    for start in response.starts:
        request = requests.get(start.job_id)
        if request is None:
            continue  # the simulator's check names it
        for unit in start.units:
            if dict(unit.amounts) != request:
                problems.append(
                    f"job {start.job_id!r} unit on {unit.node_id!r} holds "
                    f"{dict(unit.amounts)} instead of its request {dict(request)}"
                )
                break
    report = response.report
    return Answer(
        decision_from_pb(response),
        AnswerReport.of(report.dispatcher, report.predictor, report.profile,
                        len(report.attempts), report.status, report.model_variables,
                        report.model_constraints, report.total_seconds, report.fallback_reason,
                        report.dispatcher_name, report.predictor_name),
        tuple(problems),
        tuple(expected_start_of(e) for e in report.expected_starts),
    )


def expected_start_of(e: pb.ExpectedStart) -> ExpectedStart:
    """The wire's expected start as the simulator reads it (the in-process answer's twin,
    in_process_backend.py `_expected_start`)."""
    moved = e.moved_later_seconds if e.promised and e.moved_later_seconds > 0 else 0
    return ExpectedStart(
        e.job_id, e.start_time, e.promised,
        e.likely_start if e.promised and e.HasField("likely_start") else None, moved,
        enum_name(pb.PromiseMoveReason, e.move_reason, "PROMISE_MOVE_REASON_") if moved else "")


@contextmanager
def service_target(target: str | None = None, **server_options: Any) -> Iterator[str]:
    """Yield `target`, or start a loopback service (ServerConfig `server_options`) and stop it."""
    if target:
        yield target
        return
    from hpcdispatch.server.rpc.embedded import embedded_server

    with embedded_server(**server_options) as embedded:
        yield embedded
