"""The promise book at the gRPC edge: promises sent back are verified on the way in, the
answer's promises signed on the way out, and both are counted.

On the way in (`verified`, `verified_snapshot`): Dispatch's snapshot, an OpenSession's and an
UpdateSession's submitted jobs keep a caller's promised start only with a token this server's
keys signed for that job, cluster, caller and start (server/intake/promise_tokens.py); every
other promise is taken away before any decision sees it, counted in
hpcdispatch_promises_refused_total and logged, one line per call. On the way out (`answered`):
each promise of the report gets its token, and the metrics of promises are kept from what
this server told each caller's cluster: a job that starts counts as kept when it starts no
later than the first start it was told (or brought with a valid token), and its distance from
the likely start told beside that first promise is observed; each move later is observed with
its reason, and the promises held after the latest decision of each caller and cluster are the
pending ones.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Iterable

import structlog

from hpcdispatch.snapshot import QueuedJob, Snapshot
from hpcdispatch.v1 import dispatcher_pb2 as pb

from ..config import ServerConfig
from ..domain.caller_scope import CallerScope
from ..intake.interruption import NEVER, Interruption
from ..intake.promise_tokens import PromiseTokens, verify_queue
from ..intake.shown import clipped, shown
from .metrics import ServiceMetrics, dispatcher_label

log = structlog.get_logger("hpcdispatch.server")

# Callers' clusters whose promises the metrics follow (the least recently decided go first).
MAX_SCOPES = 1024
# A promised job's first promised start and the likely start told beside it (seconds on the
# caller's clock; None: none told).
Told = tuple[int, int | None]


def move_reason_label(reason: pb.PromiseMoveReason.ValueType) -> str:
    """The `reason` label of a move later: the PromiseMoveReason's name without its prefix, in
    lower case ("node_unavailable"); a value this server does not name is "unspecified"."""
    try:
        return pb.PromiseMoveReason.Name(reason).removeprefix("PROMISE_MOVE_REASON_").lower()
    except ValueError:
        return "unspecified"


class PromiseWatch:
    """Verifies, signs and counts the promises of one server (module doc)."""

    def __init__(self, config: ServerConfig, metrics: ServiceMetrics) -> None:
        self.tokens = PromiseTokens.of(config)
        self.metrics = metrics
        # Per caller and cluster: each promised job's first promised start and the likely start
        # told beside it (absolute; None: none told, or the promise was brought).
        self._told: OrderedDict[CallerScope, dict[str, Told]] = OrderedDict()
        self._lock = threading.Lock()
        if not self.tokens.keys.shared:
            log.info("promise tokens signed with a key of this process only (no "
                     "promise_key_file): replicas do not accept each other's promises")

    # -- in ----------------------------------------------------------------------------------

    def verified(self, jobs: Iterable[QueuedJob], scope: CallerScope, t: int,
                 interruption: Interruption = NEVER, held: Iterable[QueuedJob] = (),
                 ) -> tuple[QueuedJob, ...]:
        """`jobs` sent at t by `scope`, each promise this server cannot verify taken away
        (`verify_queue`: `held` are jobs whose promises are believed already);
        DecisionAbandoned once `interruption` says the deadline has passed or the caller left."""
        checked = verify_queue(self.tokens, jobs, scope, t, interruption, held)
        if checked.refused:
            for reason, count in checked.refused.items():
                self.metrics.promises_refused.labels(reason).inc(count)
            log.warning("promises refused: the jobs hold no promise from the caller",
                        cluster=clipped(scope.cluster, 256), refused=dict(checked.refused),
                        first_job=shown(checked.first_refused))
        return checked.jobs

    def verified_snapshot(self, snapshot: Snapshot, scope: CallerScope,
                          interruption: Interruption = NEVER) -> Snapshot:
        """`snapshot` with only the promises this server verified (`verified`)."""
        if not any(q.promised_start is not None or q.promise_token for q in snapshot.queued):
            return snapshot
        return dataclasses.replace(snapshot, queued=self.verified(
            snapshot.queued, scope, snapshot.time, interruption))

    # -- out ---------------------------------------------------------------------------------

    def answered(self, response: pb.DispatchResponse, snapshot: Snapshot,
                 scope: CallerScope) -> None:
        """Sign the promises of `response` (a decision on `snapshot` for `scope`) and count
        them."""
        report = response.report
        name = report.dispatcher_name or dispatcher_label(report.dispatcher)
        promised: dict[str, Told] = {}
        starts = {e.job_id: e.start_time for e in report.expected_starts if e.promised}
        if starts:  # each token signs the job's shape and the older promises (module doc)
            queued = {q.id: q for q in snapshot.queued}
            tokens = self.tokens.sign(scope, [(queued[job_id], start)
                                              for job_id, start in starts.items()])
            for expected in report.expected_starts:
                if not expected.promised:
                    continue
                expected.promise_token = tokens[expected.job_id]
                promised[expected.job_id] = (
                    expected.start_time,
                    expected.likely_start if expected.HasField("likely_start") else None)
                if expected.moved_later_seconds > 0:
                    self.metrics.promise_moved_later.labels(name, move_reason_label(
                        expected.move_reason)).observe(expected.moved_later_seconds)
        brought = {q.id: q.promised_start for q in snapshot.queued
                   if q.promised_start is not None}
        self._follow(scope, name, snapshot.time, promised, brought,
                     [s.job_id for s in response.starts])

    def _follow(self, scope: CallerScope, name: str, t: int, promised: dict[str, Told],
                brought: dict[str, int], started: list[str]) -> None:
        """Count the promised jobs that started at t, kept or late, with their distance from
        the likely start told beside their first promise, and keep the first promise (and its
        likely start) of each still waiting job."""
        kept = late = 0
        errors: list[int] = []
        with self._lock:
            told = self._told.pop(scope, {})
            for job_id in started:
                first, likely = told.get(job_id, (brought.get(job_id), None))
                if first is not None:
                    kept, late = (kept + 1, late) if t <= first else (kept, late + 1)
                if likely is not None:
                    errors.append(abs(t - likely))
            if promised:
                self._told[scope] = {
                    job_id: told.get(job_id, (brought[job_id], None) if job_id in brought
                                     else now)
                    for job_id, now in promised.items()}
            while len(self._told) > MAX_SCOPES:
                self._told.popitem(last=False)
            self.metrics.promises_pending.set(sum(map(len, self._told.values())))
        for error in errors:
            self.metrics.likely_start_error.labels(name).observe(error)
        if kept:
            self.metrics.promised_starts.labels(name, "kept").inc(kept)
        if late:
            self.metrics.promised_starts.labels(name, "late").inc(late)
