"""A held job's promised start, written where Slurm's own commands show it: the job's Comment.

Slurm computes no start for a held job (`squeue --start` shows N/A), and its `StartTime` is a
constraint when set from outside (the earliest start, which also moves the job's eligible
time), so the bridge writes the promise into the job's Comment, which `squeue -o %k`,
`squeue -O Comment` and `scontrol show job` show its user:
`hpcdispatch: promised start 2026-11-28T09:00:00`, in Slurm's own time format (local time).
A comment the user gave the job (`sbatch --comment`) is kept after ` | `, and restored when the
job is released to start. The text carries its own marker, so a restarted bridge recognises
what an earlier one wrote.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence

from .slurm_json import SlurmJob

MARKER = "hpcdispatch: promised start "
SEPARATOR = " | "
TIME_FORMAT = "%Y-%m-%dT%H:%M:%S"  # as squeue and scontrol print times
UPDATABLE_STATES = frozenset({"PENDING", "RUNNING", "SUSPENDED", "CONFIGURING"})


def slurm_time(seconds: int) -> str:
    """Unix seconds as Slurm's commands print them: local time, to the second."""
    return time.strftime(TIME_FORMAT, time.localtime(seconds))


def users_comment(comment: str) -> str:
    """The job's comment without the promise the bridge wrote into it."""
    if not comment.startswith(MARKER):
        return comment
    _, _, rest = comment.partition(SEPARATOR)
    return rest


def with_promise(comment: str, start: int) -> str:
    """The comment that shows the promised start `start` (Unix seconds) before the user's."""
    own = users_comment(comment)
    shown = MARKER + slurm_time(start)
    return f"{shown}{SEPARATOR}{own}" if own else shown


def shows_promise(comment: str) -> bool:
    return comment.startswith(MARKER)


def comment_updates(jobs: Sequence[SlurmJob], promised: Mapping[str, int],
                    released: Collection[str]) -> dict[str, str]:
    """Job id -> the comment to write (only where it changes): each held job of `promised`
    (job id -> its promised start, Unix seconds) shows its promise; any other job still
    pending or running that shows one gets its own comment back. Jobs in `released` had theirs
    restored by the pin that released them."""
    updates: dict[str, str] = {}
    for job in jobs:
        if job.id in released or job.state not in UPDATABLE_STATES:
            continue
        if job.id in promised and job.held:
            wanted = with_promise(job.comment, promised[job.id])
        elif shows_promise(job.comment):
            wanted = users_comment(job.comment)
        else:
            continue
        if wanted != job.comment:
            updates[job.id] = wanted
    return updates
