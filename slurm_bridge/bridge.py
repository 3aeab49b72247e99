"""The bridge loop: read Slurm, ask hpcdispatch, pin and release the chosen jobs, reconcile.

One cycle: read `sinfo`/`squeue` and the reservations (`scontrol show reservation`);
reconcile the jobs released earlier with what Slurm did;
build the snapshot (a released job whose planned units no longer fit next to what Slurm runs
is not reserved but held again, and queued in this snapshot); ask for a decision; check the
decision independently; then, job by job, pin (`scontrol update NodeList=`) and release. A held
job whose rules the snapshot cannot express (site_rules.py) is released unpinned, to Slurm's
own scheduler, and logged once (`job_left_to_slurm`). A
stop request is honoured between jobs, never between the pin and the release of one job.
Errors never end the loop: the next cycle waits with exponential backoff (interval ×
2^failures, capped) and the held jobs simply stay held.

Decisions go through one session of the service per bridge (`DispatcherClient.session()`, with
unary calls rather than a session stream: docs/slurm-bridge.md): the
first one opens it with the whole snapshot, each later one sends only what changed since the
previous one (jobs submitted, cancelled, started by the bridge or by Slurm, ended; nodes
changed). The client resyncs on its own when the server cannot apply a delta (it restarted,
forgot the session, ...); the bridge counts and logs each resync. `full_snapshots` sends every
snapshot whole with Dispatch instead. Both paths send the same snapshot (`keep_order`) and
the decision is checked the same way.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import grpc
import structlog

from hpcdispatch.catalog import session_tag
from hpcdispatch.decision_check import check_decision
from hpcdispatch.proto_convert import decision_from_pb, snapshot_to_pb
from hpcdispatch.snapshot import NodeState, Snapshot
from hpcdispatch.v1 import dispatcher_pb2 as pb

from .job_units import UnplaceableError, placement_for, unit_shape
from .metrics import BridgeMetrics
from .promise_comment import comment_updates, shows_promise, users_comment
from .slurm_cli import SlurmCommandError, SlurmCommands
from .slurm_json import (
    ACTIVE_STATES,
    FINISHED_STATES,
    SlurmJob,
    SlurmNode,
    SlurmParseError,
    parse_jobs,
    parse_nodes,
)
from .slurm_reservations import SlurmReservation, parse_reservations
from .snapshot_builder import (
    BuilderSettings,
    BuiltSnapshot,
    InFlight,
    build_snapshot,
    is_managed_partition,
    keep_order,
    node_state,
)

UNREACHABLE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


class DecisionSession(Protocol):
    """What the bridge needs of hpcdispatch.client.DispatchSession."""

    session_id: str | None
    opens: int
    resyncs: int
    reasons: Counter[str]
    deltas: int
    sessions_unsupported: bool

    def decide(
        self, request: pb.DispatchRequest, timeout: float | None = None
    ) -> pb.DispatchResponse: ...

    def close(self, timeout: float | None = None) -> None: ...


class DispatchService(Protocol):
    """What the bridge needs of hpcdispatch.client.DispatcherClient (and, for the session
    path, `session(timeout, stream=False) -> DecisionSession`, unary session calls; a service
    without it gets full snapshots)."""

    def dispatch(
        self, request: pb.DispatchRequest, timeout: float | None = None
    ) -> pb.DispatchResponse: ...

    def report_completions(
        self, completions: Iterable[pb.JobCompletion], cluster: str = "",
        timeout: float | None = None,
    ) -> int: ...


@dataclass(frozen=True, slots=True)
class BridgeConfig:
    partitions: frozenset[str]
    interval: float = 10.0  # seconds between cycles
    dry_run: bool = False
    dispatcher: int = pb.DISPATCHER_UNSPECIFIED
    predictor: int = pb.PREDICTOR_UNSPECIFIED
    cluster: str = ""  # knowledge-base name at the service
    dispatcher_name: str = ""  # a plugin's dispatcher, by name (DispatchRequest.dispatcher_name)
    predictor_name: str = ""  # a plugin's predictor, by name
    dispatch_timeout: float = 30.0  # deadline of one decision call, seconds
    max_backoff: float = 300.0  # longest wait after repeated failures, seconds
    start_timeout: float = 60.0  # a released job not started after this is held again
    track_memory: bool = True
    default_walltime: int = 86_400
    report_completions: bool = True
    full_snapshots: bool = False  # Dispatch with whole snapshots instead of a session
    profile: str = ""  # the CP dispatchers' search profile; empty = the server's default
    # The promise book's knob (SearchParameters.promise_after_s): how long a held job waits
    # before it holds a promise, a rung of its ladder (0: every job from its arrival); None:
    # the profile's.
    promise_after_s: int | None = None
    # Show each held job's promised start and likely start in its Comment (promise_comment.py).
    promise_comments: bool = True
    # Read `scontrol show reservation` each cycle: reservations become windows (site_rules.py).
    reservations: bool = True


# Labels of hpcdispatch_bridge_decisions_total{via}.
VIA_OPEN, VIA_DELTA, VIA_FULL = "session_open", "session_delta", "full_snapshot"
# The bridge's own resync reason: the client dropped its session after a failed call (e.g. the
# server was unreachable), and the next decision opened a new one.
SESSION_LOST = "SESSION_LOST"
# reconciliations_total{kind}: a released job not started yet whose planned units no longer
# fit next to what Slurm really runs; held again at once and decided again.
NO_LONGER_FITS = "no_longer_fits"


@dataclass(frozen=True, slots=True)
class _SessionCounts:
    opens: int
    deltas: int
    reasons: Counter[str]
    live: bool

    @staticmethod
    def of(session: DecisionSession) -> _SessionCounts:
        return _SessionCounts(session.opens, session.deltas, Counter(session.reasons),
                              session.session_id is not None)


@dataclass(slots=True)
class CycleResult:
    ok: bool
    error_kind: str = ""
    decided: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    left_held: list[str] = field(default_factory=list)  # decided but not applied
    # The decision's promised starts of the jobs that wait: job id -> Unix seconds; and the
    # likely start beside each promise the decision gave one (ExpectedStart.likely_start).
    promised: dict[str, int] = field(default_factory=dict)
    likely: dict[str, int] = field(default_factory=dict)


class Bridge:
    def __init__(
        self,
        config: BridgeConfig,
        slurm: SlurmCommands,
        service: DispatchService,
        metrics: BridgeMetrics | None = None,
        clock: Callable[[], float] = time.time,
        out: Callable[[str], None] = print,
    ) -> None:
        self.config = config
        self.slurm = slurm
        self.service = service
        self.metrics = metrics or BridgeMetrics()
        self.clock = clock
        self.out = out
        self.log: Any = structlog.get_logger("hpcdispatch.slurm_bridge")
        self.stop_event = threading.Event()
        self.in_flight: dict[str, InFlight] = {}
        self.failures = 0
        self.started_at = int(clock())
        self._reported: set[str] = set()
        self._comments: dict[str, str] = {}  # job id -> its Comment, as read this cycle
        self._warned_unmanaged: set[str] = set()
        self._settings = BuilderSettings(config.partitions, config.track_memory,
                                         config.default_walltime)
        self._previous: Snapshot | None = None  # the last snapshot built (keep_order)
        self.session: DecisionSession | None = None
        self._session_lost = False  # the client dropped a session after a failed call
        self._warned_no_sessions = False
        if not config.full_snapshots:
            open_session = getattr(service, "session", None)
            if open_session is None:
                self.log.warning("service_without_sessions_full_snapshots")
            else:
                # Unary session calls, not a stream: one decision per cycle (every `interval`
                # seconds) saves nothing worth a server thread held for the bridge's life.
                self.session = open_session(config.dispatch_timeout, stream=False)

    # -- loop ---------------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Ask the loop to stop after the job being applied (safe from a signal handler)."""
        self.stop_event.set()

    def run(self, once: bool = False) -> int:
        """Run cycles until stopped; returns 0, or 1 when `once` and the cycle failed."""
        self.log.info("bridge_started", partitions=sorted(self.config.partitions),
                      interval=self.config.interval, dry_run=self.config.dry_run,
                      decisions="full_snapshots" if self.session is None else "session")
        result = CycleResult(ok=True)
        try:
            while not self.stop_event.is_set():
                result = self.cycle()
                if once:
                    break
                wait = self.next_wait(result)
                if self.stop_event.wait(wait):
                    break
        finally:
            self.close_session()
        self.log.info("bridge_stopped", in_flight=sorted(self.in_flight))
        return 0 if result.ok else 1

    def close_session(self) -> None:
        """Close the session at the service, if one is open (best effort: the service forgets
        an idle session on its own). A later decision opens a new one."""
        if self.session is None or self.session.session_id is None:
            return
        tag = _tag(self.session)
        self.session.close(timeout=min(5.0, self.config.dispatch_timeout))
        self._session_lost = False
        self.log.info("session_closed", session=tag, opens=self.session.opens,
                      deltas=self.session.deltas, resyncs=self.session.resyncs)

    def next_wait(self, result: CycleResult) -> float:
        """The interval after a good cycle; exponential backoff after failed ones."""
        if result.ok:
            self.failures = 0
            self.metrics.backoff_seconds.set(0)
            return self.config.interval
        self.failures += 1
        wait = min(self.config.max_backoff, self.config.interval * 2 ** self.failures)
        self.metrics.backoff_seconds.set(wait)
        self.log.warning("retry_with_backoff", error_kind=result.error_kind,
                         consecutive_failures=self.failures, retry_in_s=wait)
        return wait

    # -- one cycle ----------------------------------------------------------------------------

    def cycle(self) -> CycleResult:
        t0 = time.monotonic()
        try:
            result = self._cycle()
        except Exception as exc:  # a bug must not end the daemon: log, count, back off
            self.log.exception("cycle_crashed", error=repr(exc))
            result = CycleResult(ok=False, error_kind="internal")
            self.metrics.errors.labels("internal").inc()
        elapsed = time.monotonic() - t0
        self.metrics.cycle_seconds.observe(elapsed)
        outcome = "error" if not result.ok else ("dry_run" if self.config.dry_run else "ok")
        self.metrics.cycles.labels(outcome).inc()
        self.log.info("cycle", outcome=outcome, error_kind=result.error_kind or None,
                      decided=len(result.decided), released=result.released,
                      left_held=result.left_held, in_flight=len(self.in_flight),
                      duration_s=round(elapsed, 4))
        return result

    def _cycle(self) -> CycleResult:
        now = int(self.clock())
        try:
            nodes = parse_nodes(self.slurm.sinfo())
            threads = {n.name: n.threads for n in nodes}
            jobs = parse_jobs(self.slurm.squeue(), threads)
            reservations: list[SlurmReservation] = (
                parse_reservations(self.slurm.reservations()) if self.config.reservations
                else [])
        except SlurmCommandError as exc:
            return self._fail("slurm_command", "slurm_read_failed", error=str(exc))
        except SlurmParseError as exc:
            return self._fail("slurm_parse", "slurm_output_unreadable", error=str(exc))

        self._comments = {j.id: j.comment for j in jobs}
        self._reconcile(nodes, jobs, now)
        built = build_snapshot(nodes, jobs, self._settings, now, self.in_flight, reservations)
        if built.unfit:
            jobs = self._rehold_unfit(built, jobs)
            built = build_snapshot(nodes, jobs, self._settings, now, self.in_flight,
                                   reservations)
        built.snapshot = keep_order(self._previous, built.snapshot)
        self._previous = built.snapshot
        self._observe(built)
        for job_id, why in built.ignored.items():
            self._warn_once(job_id, "held_job_not_managed", reason=why)

        result = CycleResult(ok=True)
        if built.snapshot.queued:
            dispatched = self._dispatch(built)
            if not dispatched.ok:
                return dispatched
            result = dispatched
        self._leave_to_slurm(built.to_slurm)  # after the decided jobs: they were placed first
        if self.config.promise_comments and not self.config.dry_run:
            self._show_promises(jobs, result)
        if self.config.report_completions and not self.config.dry_run:
            self._report_completions(jobs, nodes)
        return result

    def _leave_to_slurm(self, jobs: dict[str, str]) -> None:
        """Release the held jobs the snapshot cannot express, unpinned: Slurm's own scheduler
        places them under their own rules (never the bridge, which would mis-place them)."""
        for job_id, why in jobs.items():
            if self.config.dry_run:
                self.out(f"dry-run: would leave job {job_id} to Slurm ({why})")
                continue
            try:
                self.slurm.release(job_id)
            except SlurmCommandError as exc:
                self.metrics.errors.labels("slurm_command").inc()
                self.log.warning("leave_to_slurm_failed", job_id=job_id, error=str(exc))
                continue
            self._warned_unmanaged.add(job_id)  # not "pending_job_not_held" later
            self.metrics.left_to_slurm.inc()
            self.log.warning("job_left_to_slurm", job_id=job_id, reason=why,
                             note="released unpinned: Slurm's own scheduler places it")

    def _fail(self, kind: str, event: str, **fields: Any) -> CycleResult:
        self.metrics.errors.labels(kind).inc()
        self.log.error(event, error_kind=kind, **fields)
        return CycleResult(ok=False, error_kind=kind)

    def _observe(self, built: BuiltSnapshot) -> None:
        snap = built.snapshot
        self.metrics.held_jobs.set(len(snap.queued))
        self.metrics.in_flight_jobs.set(len(self.in_flight))
        counts = Counter(n.state.value for n in snap.nodes)
        for state in NodeState:
            self.metrics.nodes.labels(state.value).set(counts.get(state.value, 0))

    # -- dispatch and apply -------------------------------------------------------------------

    def _dispatch(self, built: BuiltSnapshot) -> CycleResult:
        snapshot = built.snapshot
        request = snapshot_to_pb(snapshot)
        request.dispatcher = self.config.dispatcher  # type: ignore[assignment]
        request.predictor = self.config.predictor  # type: ignore[assignment]
        request.dispatcher_name = self.config.dispatcher_name
        request.predictor_name = self.config.predictor_name
        request.cluster = self.config.cluster
        if self.config.profile:
            request.search.profile = self.config.profile
        if self.config.promise_after_s is not None:
            request.search.promise_after_s = self.config.promise_after_s
        held = [j.id for j in snapshot.queued]
        t0 = time.monotonic()
        try:
            response, via = self._decide(request)
        except grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, grpc.Call) else None
            kind = "service_unavailable" if code in UNREACHABLE_CODES else "service_error"
            return self._fail(kind, "dispatch_failed_jobs_stay_held", code=str(code),
                              details=exc.details() if isinstance(exc, grpc.Call) else str(exc),
                              held_jobs=len(held))
        self.metrics.dispatch_seconds.observe(time.monotonic() - t0)
        self.metrics.decisions.labels(via).inc()
        decision = decision_from_pb(response)
        self.metrics.jobs_decided.inc(len(decision.starts))
        problems = check_decision(snapshot, decision)
        if problems:
            return self._fail("invalid_decision", "decision_rejected", problems=problems[:10])
        result = CycleResult(ok=True, decided=[s.job_id for s in decision.starts])
        result.promised = {e.job_id: e.start_time for e in response.report.expected_starts
                           if e.promised}
        result.likely = {e.job_id: e.likely_start for e in response.report.expected_starts
                         if e.promised and e.HasField("likely_start")}
        self.log.info("decision", time=snapshot.time, held_jobs=len(held), via=via,
                      starts={s.job_id: list(s.nodes) for s in decision.starts},
                      status=pb.SolveStatus.Name(response.report.status))
        for index, start in enumerate(decision.starts):
            if self.stop_event.is_set():
                result.left_held = [s.job_id for s in decision.starts[index:]]
                self.log.warning("stop_requested_jobs_left_held", jobs=result.left_held)
                break
            self._apply(built, snapshot, start.job_id, start.nodes, result)
        return result

    def _decide(self, request: pb.DispatchRequest) -> tuple[pb.DispatchResponse, str]:
        """The decision on `request` and how it was asked (VIA_*)."""
        session = self.session
        if session is None:
            return self.service.dispatch(request, timeout=self.config.dispatch_timeout), VIA_FULL
        before = _SessionCounts.of(session)
        try:
            response = session.decide(request, timeout=self.config.dispatch_timeout)
        except grpc.RpcError:
            self._observe_session(session, before)
            if before.live and session.session_id is None and session.reasons == before.reasons:
                self._session_lost = True  # the next decision opens a new session
            raise
        return response, self._observe_session(session, before)

    def _observe_session(self, session: DecisionSession, before: _SessionCounts) -> str:
        """Count and log what the session did in one decide call; returns its VIA_*."""
        resynced = session.reasons - before.reasons
        opened = session.opens > before.opens
        if opened and not resynced and self._session_lost:
            resynced = Counter({SESSION_LOST: 1})
        if opened:
            self._session_lost = False
        for reason, count in sorted(resynced.items()):
            self.metrics.session_resyncs.labels(reason.lower()).inc(count)
            self.log.warning("session_resynced", reason=reason, session=_tag(session),
                             resyncs=session.resyncs,
                             note="the session is opened again with the whole snapshot")
        if opened and not resynced:
            self.log.info("session_opened", session=_tag(session))
        if session.deltas > before.deltas:
            return VIA_DELTA
        if opened:
            return VIA_OPEN
        if session.sessions_unsupported and not self._warned_no_sessions:
            self._warned_no_sessions = True
            self.log.warning("sessions_unimplemented_full_snapshots",
                             note="the service has no SessionService; every decision sends "
                             "the whole snapshot")
        return VIA_FULL

    def _apply(self, built: BuiltSnapshot, snapshot: Snapshot, job_id: str,
               unit_nodes: Sequence[str], result: CycleResult) -> None:
        shape = built.shapes[job_id]
        try:
            placement = placement_for(shape, unit_nodes)
        except UnplaceableError as exc:
            self.metrics.errors.labels("unplaceable").inc()
            self.log.warning("decision_not_applicable_job_stays_held", job_id=job_id,
                             reason=str(exc))
            result.left_held.append(job_id)
            return
        num_nodes = None if shape.one_per_node else placement.num_nodes
        if self.config.dry_run:
            self.out(f"dry-run: would start job {job_id} on {placement.node_list} "
                     f"(units on {','.join(unit_nodes)})")
            return
        comment = self._comments.get(job_id, "")
        try:  # the promise leaves the job's Comment as it starts
            self.slurm.pin(job_id, placement.node_list, num_nodes,
                           users_comment(comment) if shows_promise(comment) else None)
        except SlurmCommandError as exc:
            self.metrics.errors.labels("slurm_command").inc()
            self.log.error("pin_failed_job_stays_held", job_id=job_id, error=str(exc))
            result.left_held.append(job_id)
            return
        try:
            self.slurm.release(job_id)
        except SlurmCommandError as exc:
            self.metrics.errors.labels("slurm_command").inc()
            self.log.error("half_applied_pinned_not_released", job_id=job_id,
                           nodes=placement.node_list, error=str(exc),
                           note="the job stays held and is dispatched again next cycle")
            result.left_held.append(job_id)
            return
        queued = next(q for q in snapshot.queued if q.id == job_id)
        self.in_flight[job_id] = InFlight(job_id, tuple(unit_nodes), dict(shape.per_unit),
                                          snapshot.time, queued.requested_time)
        self.metrics.jobs_released.inc()
        result.released.append(job_id)
        self.log.info("job_released", job_id=job_id, nodes=placement.node_list,
                      num_nodes=num_nodes)

    def _show_promises(self, jobs: Sequence[SlurmJob], result: CycleResult) -> None:
        """Each held job's promised start, and the likely start beside it, in its Comment; the
        user's own comment back on any other job that still shows one (promise_comment.py). A
        failed update is logged and counted, and tried again next cycle."""
        updates = comment_updates(jobs, result.promised, result.released, result.likely)
        for job_id, comment in updates.items():
            try:
                self.slurm.set_comment(job_id, comment)
            except SlurmCommandError as exc:
                self.metrics.errors.labels("slurm_command").inc()
                self.log.warning("promise_comment_failed", job_id=job_id, error=str(exc))
                continue
            shown = shows_promise(comment)
            self.metrics.promise_comments.labels("shown" if shown else "cleared").inc()
            self.log.info("promise_shown" if shown else "promise_cleared", job_id=job_id,
                          comment=comment)

    # -- reconciliation -----------------------------------------------------------------------

    def _reconcile(self, nodes: Sequence[SlurmNode], jobs: Sequence[SlurmJob], now: int) -> None:
        """Compare the released jobs with what Slurm did; adopt pinned jobs after a restart."""
        by_id = {j.id: j for j in jobs}
        known = set(self.in_flight)  # this cycle's `jobs` predates any re-hold below
        up = {n.name for n in nodes if node_state(n) is NodeState.UP}
        for job_id, flight in list(self.in_flight.items()):
            job = by_id.get(job_id)
            if job is None:
                self._reconciled("vanished", job_id)
            elif job.allocations and (job.state in ACTIVE_STATES or job.state in FINISHED_STATES):
                self._check_started(job, flight)
            elif job.state in FINISHED_STATES:
                self._reconciled("ended_before_start", job_id, state=job.state)
            elif job.held:
                self._reconciled("held_again", job_id)
            elif job.state == "PENDING":
                down = sorted(set(flight.unit_nodes) - up)
                if down:
                    self._rehold(job_id, "node_unavailable", nodes=down)
                elif now - flight.released_at > self.config.start_timeout:
                    self._rehold(job_id, "not_started", reason=job.reason,
                                 waited_s=now - flight.released_at)
        if self.config.dry_run:
            return
        for job in jobs:
            if (job.state == "PENDING" and not job.held and job.id not in known
                    and is_managed_partition(job, self.config.partitions)):
                if job.required_nodes:
                    self._adopt(job, now)
                else:
                    self._warn_once(job.id, "pending_job_not_held",
                                    note="submitted without hold; Slurm schedules it itself")

    def _check_started(self, job: SlurmJob, flight: InFlight) -> None:
        del self.in_flight[job.id]
        actual = {a.node: a.cpus for a in job.allocations}
        planned = Counter(flight.unit_nodes)
        if set(actual) != set(planned):
            self.metrics.reconciliations.labels("started_elsewhere").inc()
            self.log.warning("reconcile_started_elsewhere", job_id=job.id,
                             planned=sorted(planned), actual=sorted(actual))
            return
        cores = flight.per_unit.get("core", 1)
        if any(actual[n] != c * cores for n, c in planned.items()):
            self.metrics.reconciliations.labels("layout_differs").inc()
            self.log.info("reconcile_layout_differs", job_id=job.id,
                          planned={n: c * cores for n, c in planned.items()}, actual=actual)
        self.log.info("job_started", job_id=job.id, nodes=sorted(actual))

    def _reconciled(self, kind: str, job_id: str, **fields: Any) -> None:
        self.in_flight.pop(job_id, None)
        self.metrics.reconciliations.labels(kind).inc()
        self.log.warning("reconcile_" + kind, job_id=job_id, **fields)

    def _rehold(self, job_id: str, kind: str, **fields: Any) -> bool:
        """Take a released job that cannot start back under the bridge's control."""
        try:
            self.slurm.hold(job_id)
            self.slurm.unpin(job_id)
        except SlurmCommandError as exc:
            self.metrics.errors.labels("slurm_command").inc()
            self.log.error("rehold_failed", job_id=job_id, error=str(exc), kind=kind)
            return False
        self._reconciled(kind, job_id, action="held again and unpinned", **fields)
        return True

    def _rehold_unfit(self, built: BuiltSnapshot, jobs: Sequence[SlurmJob]) -> list[SlurmJob]:
        """Hold again the released jobs whose planned units no longer fit (the snapshot left
        them out: reserving them would over-commit a node, e.g. after Slurm laid another job
        out otherwise than decided). Returns `jobs` with those now held, so that they are
        queued again in this cycle's snapshot. A job whose hold fails stays in flight; every
        snapshot leaves it out while it does not fit, and the next cycle tries again."""
        reheld = {
            job_id for job_id, over in built.unfit.items()
            if self._rehold(job_id, NO_LONGER_FITS, nodes=over,
                            planned=sorted(set(self.in_flight[job_id].unit_nodes)),
                            note="Slurm's real allocations leave no room for its planned "
                            "units; it is decided again")
        }
        return [dataclasses.replace(j, reason="JobHeldAdmin", required_nodes=())
                if j.id in reheld else j for j in jobs]

    def _adopt(self, job: SlurmJob, now: int) -> None:
        shape = unit_shape(job, self.config.track_memory, 0)
        nodes = job.required_nodes
        unit_nodes = tuple(nodes[i % len(nodes)] for i in range(shape.units))
        self.in_flight[job.id] = InFlight(job.id, unit_nodes, dict(shape.per_unit), now,
                                          job.time_limit_s or self.config.default_walltime)
        self.metrics.reconciliations.labels("adopted").inc()
        self.log.info("reconcile_adopted_pinned_job", job_id=job.id, nodes=list(nodes))

    def _warn_once(self, job_id: str, event: str, **fields: Any) -> None:
        if job_id not in self._warned_unmanaged:
            self._warned_unmanaged.add(job_id)
            self.log.warning(event, job_id=job_id, **fields)

    # -- completions --------------------------------------------------------------------------

    def _report_completions(self, jobs: Sequence[SlurmJob], nodes: Sequence[SlurmNode]) -> None:
        visible = {j.id for j in jobs}
        self._reported &= visible
        node_memory = max((n.real_memory for n in nodes), default=0)
        batch = []
        for job in jobs:
            if (job.state in FINISHED_STATES and job.allocations and job.start_time > 0
                    and job.end_time >= max(job.start_time, self.started_at)
                    and job.id not in self._reported
                    and is_managed_partition(job, self.config.partitions)):
                shape = unit_shape(job, self.config.track_memory, node_memory)
                batch.append(pb.JobCompletion(
                    job_id=job.id, user=job.user, name=job.name,
                    queue=",".join(job.partitions), units=shape.units,
                    unit_request=shape.per_unit,
                    requested_time=job.time_limit_s or self.config.default_walltime,
                    start_time=job.start_time, end_time=job.end_time,
                ))
        if not batch:
            return
        try:
            self.service.report_completions(batch, cluster=self.config.cluster,
                                            timeout=self.config.dispatch_timeout)
        except grpc.RpcError as exc:
            self.metrics.errors.labels("report_completions").inc()
            self.log.warning("report_completions_failed", jobs=len(batch), error=str(exc))
            return
        self._reported.update(c.job_id for c in batch)
        self.metrics.completions.inc(len(batch))
        self.log.info("completions_reported", jobs=[c.job_id for c in batch])


def _tag(session: DecisionSession) -> str | None:
    """The session's short tag for logs (catalog.session_tag): its id is a secret that logs
    never show. None without an open session."""
    return session_tag(session.session_id) if session.session_id is not None else None
