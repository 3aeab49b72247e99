"""A held job's promised start, written where Slurm's own commands show it: the job's Comment.

Slurm computes no start for a held job (`squeue --start` shows N/A), and its `StartTime` is a
constraint when set from outside (the earliest start, which also moves the job's eligible
time), so the bridge writes the promise into the job's Comment, which `squeue -o %k`,
`squeue -O Comment` and `scontrol show job` show its user:
`hpcdispatch: starts by 2026-11-28T09:00:00, likely 2026-11-28T07:40:00`, in Slurm's own time
format (local time). "starts by" is the promise, a guarantee computed from requested times (it
moves later only when a node goes down or a running job runs past its limit); "likely" the
predictor's plan, an estimate, left out when the decision gave none. A comment the user gave
the job (`sbatch --comment`) is kept after ` | `, and restored when the job is released to
start. The text carries its own marker, so a restarted bridge recognises what an earlier one
wrote (also an older bridge's `hpcdispatch: promised start ...`).
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence

from .slurm_json import SlurmJob

MARKER = "hpcdispatch: starts by "
OLD_MARKERS = ("hpcdispatch: promised start ",)  # what earlier bridges wrote
LIKELY = ", likely "
SEPARATOR = " | "
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"  # as squeue and scontrol print times
UPDATABLE_STATES = frozenset({"PENDING", "RUNNING", "SUSPENDED", "CONFIGURING"})


def slurm_time(seconds: int) -> str:
    """Unix seconds as Slurm's commands print them: local time, to the second."""
    return time.strftime(TIME_FORMAT, time.localtime(seconds))


def users_comment(comment: str) -> str:
    """The job's comment without the promise the bridge wrote into it."""
    if not shows_promise(comment):
        return comment
    _, _, rest = comment.partition(SEPARATOR)
    return rest


def promise_text(start: int, likely: int | None = None) -> str:
    """`hpcdispatch: starts by <start>, likely <likely>` (Unix seconds; without a likely
    start, or one no earlier than the promise, only `starts by`)."""
    shown = MARKER + slurm_time(start)
    if likely is not None and likely < start:
        shown += LIKELY + slurm_time(likely)
    return shown


def with_promise(comment: str, start: int, likely: int | None = None) -> str:
    """The comment that shows the promised start `start` and the likely start `likely` (Unix
    seconds) before the user's."""
    own = users_comment(comment)
    shown = promise_text(start, likely)
    return f"{shown}{SEPARATOR}{own}" if own else shown


def shows_promise(comment: str) -> bool:
    return comment.startswith((MARKER, *OLD_MARKERS))


def comment_updates(jobs: Sequence[SlurmJob], promised: Mapping[str, int],
                    released: Collection[str],
                    likely: Mapping[str, int] | None = None) -> dict[str, str]:
    """Job id -> the comment to write (only where it changes): each held job of `promised`
    (job id -> its promised start, Unix seconds) shows its promise, with its likely start of
    `likely` (job id -> Unix seconds) where there is one; any other job still pending or
    running that shows one gets its own comment back. Jobs in `released` had theirs restored
    by the pin that released them."""
    likely = likely or {}
    updates: dict[str, str] = {}
    for job in jobs:
        if job.id in released or job.state not in UPDATABLE_STATES:
            continue
        if job.id in promised and job.held:
            wanted = with_promise(job.comment, promised[job.id], likely.get(job.id))
        elif shows_promise(job.comment):
            wanted = users_comment(job.comment)
        else:
            continue
        if wanted != job.comment:
            updates[job.id] = wanted
    return updates
