"""Each waiting job's expected start as a site admin reads `squeue --start`: one line per job of
`DecisionReport.expected_starts`, soonest first, with its start as a date and as "in 2h13m",
whether it is a promise (kept, only ever moved earlier: the promise book, conservative's
reservations) or an estimate of the current plan, and how much later a promise had to move."""

from __future__ import annotations

import datetime

from hpcdispatch.v1 import dispatcher_pb2 as pb

HEADER = ("JOBID", "PARTITION", "USER", "START_TIME", "IN", "KIND", "MOVED_LATER")


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


def start_rows(request: pb.DispatchRequest, response: pb.DispatchResponse) -> list[tuple[str, ...]]:
    """The table's rows (HEADER's columns), soonest start first."""
    jobs = {q.id: q for q in request.queued_jobs}
    rows: list[tuple[str, ...]] = []
    for e in sorted(response.report.expected_starts, key=lambda e: (e.start_time, e.job_id)):
        job = jobs.get(e.job_id, pb.QueuedJob())
        rows.append((
            e.job_id, job.queue or "-", job.user or "-",
            date(e.start_time), f"in {span(e.start_time - response.time)}",
            "promised" if e.promised else "estimate",
            f"+{span(e.moved_later_seconds)}" if e.moved_later_seconds else "-",
        ))
    return rows


def start_table(request: pb.DispatchRequest, response: pb.DispatchResponse) -> str:
    """The table, or a line saying why there is none."""
    rows = start_rows(request, response)
    if not rows:
        return ("no expected starts: this dispatcher and profile plan no start for the waiting "
                "jobs (--profile book promises one to each; easy and conservative report their "
                "reservations)")
    widths = [max(len(r[i]) for r in (HEADER, *rows)) for i in range(len(HEADER))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in (HEADER, *rows)]
    promised = sum(1 for r in rows if r[5] == "promised")
    lines.append(f"{promised} promised (kept, only ever moved earlier), {len(rows) - promised} "
                 "estimated (the current plan); START_TIME: the snapshot's clock as UTC")
    return "\n".join(lines)
