"""Each waiting job's expected start as a site admin reads `squeue --start`: one line per job of
`DecisionReport.expected_starts`, soonest first. A promise (the promise book, conservative's
reservations) is a guarantee computed from requested times: the job starts by STARTS_BY unless
a node goes down or a running job runs past its limit, and LIKELY beside it is the predictor's
plan. An estimate has no STARTS_BY: its LIKELY is the current plan, which may change either
way. IN is the wait until LIKELY (until STARTS_BY for a promise without a likely start);
MOVED_LATER and WHY say how much later a promise had to move at this decision, and why. A job
that can never fit on the snapshot's up nodes has no start: a line after the table says why."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence

from hpcdispatch.v1 import dispatcher_pb2 as pb

HEADER = ("JOBID", "PARTITION", "USER", "KIND", "STARTS_BY", "LIKELY", "IN", "MOVED_LATER",
          "WHY")
# Why a promise moved later (pb.PromiseMoveReason), in a word or two.
MOVE_WORDS = {
    pb.PROMISE_MOVE_REASON_UNSPECIFIED: "not-said",
    pb.PROMISE_MOVE_REASON_NODE_UNAVAILABLE: "node-down",
    pb.PROMISE_MOVE_REASON_RAN_PAST_LIMIT: "job-past-limit",
    pb.PROMISE_MOVE_REASON_SHAPE_CHANGED: "job-changed",
    pb.PROMISE_MOVE_REASON_OLDER_PROMISE: "older-promise",
    pb.PROMISE_MOVE_REASON_WINDOW: "window",
}


def span(seconds: int) -> str:
    """A duration as a person reads it: 45s, 13m, 2h13m, 3d04h."""
    seconds = max(seconds, 0)
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m" if not secs else f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def date(t: int) -> str:
    """Seconds of the snapshot's clock as a UTC date, as squeue prints START_TIME."""
    try:
        moment = datetime.datetime.fromtimestamp(t, datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return str(t)
    return moment.strftime("%Y-%m-%dT%H:%M:%S")


def likely_start(e: pb.ExpectedStart) -> int | None:
    """The likely start: beside a promise, its `likely_start` (None without one); an
    estimate's start_time."""
    if not e.promised:
        return e.start_time
    return e.likely_start if e.HasField("likely_start") else None


def start_rows(request: pb.DispatchRequest, response: pb.DispatchResponse) -> list[tuple[str, ...]]:
    """The table's rows (HEADER's columns), soonest start first."""
    jobs = {q.id: q for q in request.queued_jobs}
    rows: list[tuple[str, ...]] = []
    for e in sorted(response.report.expected_starts, key=lambda e: (e.start_time, e.job_id)):
        job = jobs.get(e.job_id, pb.QueuedJob())
        likely = likely_start(e)
        moved = e.moved_later_seconds if e.promised and e.moved_later_seconds > 0 else 0
        rows.append((
            e.job_id, job.queue or "-", job.user or "-",
            "promised" if e.promised else "estimate",
            date(e.start_time) if e.promised else "-",
            "-" if likely is None else date(likely),
            span((e.start_time if likely is None else likely) - response.time),
            f"+{span(moved)}" if moved else "-",
            MOVE_WORDS.get(e.move_reason, "not-said") if moved else "-",
        ))
    return rows


def never_fits_lines(request: pb.DispatchRequest, response: pb.DispatchResponse) -> list[str]:
    """A line per waiting job that could not start even on the idle up nodes of the snapshot
    (one unit never spans two nodes): it has no start to show, and the line says why."""
    up = [n.capacity for n in request.nodes if n.state == pb.NODE_STATE_UP]
    shown = {e.job_id for e in response.report.expected_starts} | {
        s.job_id for s in response.starts}
    lines = []
    for job in request.queued_jobs:
        if job.id in shown:
            continue
        why = _why_never(job, up)
        if why is not None:
            lines.append(f"never fits, so not in the table: {job.id} {why}")
    return lines


def _why_never(job: pb.QueuedJob, up: Sequence[Mapping[str, int]]) -> str | None:
    """Why `job`'s units could not all start even on the idle up nodes, or None if they could."""
    request = {r: a for r, a in job.unit_request.items() if a > 0}
    shown = ", ".join(f"{r}={a}" for r, a in sorted(request.items()))
    for r, a in sorted(request.items()):
        most = max((c.get(r, 0) for c in up), default=0)
        if most < a:
            return (f"asks {a} {r} per unit ({shown}); no up node has more than {most}"
                    f"{'' if up else ' (no node is up)'}")
    room = sum(min((c.get(r, 0) // a for r, a in request.items()), default=0) for c in up)
    if room >= job.units:
        return None
    return (f"asks {job.units:,} units of {shown}; the up nodes, all idle, hold at most "
            f"{room:,} such units")


def start_table(request: pb.DispatchRequest, response: pb.DispatchResponse) -> str:
    """The table, or a line saying why there is none; a line per job that never fits."""
    never = never_fits_lines(request, response)
    rows = start_rows(request, response)
    if not rows:
        return "\n".join([
            "no expected starts: this dispatcher and profile plan no start for the waiting "
            "jobs (--profile book promises one to each job that waited its promise_after_s "
            "and estimates the others; easy and conservative report their reservations)",
            *never])
    widths = [max(len(r[i]) for r in (HEADER, *rows)) for i in range(len(HEADER))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in (HEADER, *rows)]
    promised = sum(1 for r in rows if r[3] == "promised")
    lines.append(
        f"{promised} promised (starts by STARTS_BY unless a node goes down or a running job "
        f"runs past its requested time; LIKELY: the predictor's plan), {len(rows) - promised} "
        "estimated (LIKELY: the current plan, which may change); times: the snapshot's clock "
        "as UTC")
    return "\n".join([*lines, *never])
