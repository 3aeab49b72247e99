"""A plain event-driven EASY backfilling simulator on processor counts: the yardstick of a replay's
cost.

What a classical trace simulator (pyss, the Hebrew University's 2007 scheduler simulator) does for
a machine of identical single-processor units, and nothing more: no protocol, no service, no
predictor, no independent check. Each job holds `width` processors for its run time, killed at its
requested time; estimates are the requested times. At each time point, finished jobs release
their processors first, then submissions join the queue, then the queue is scheduled once:

- the head (oldest queued job) starts while it fits;
- otherwise it gets a reservation at the shadow time, the earliest estimated end of running jobs
  by which enough processors are free, and `extra` processors are what is free then beyond its
  need;
- every later job, in submit order, starts now if it fits and either ends (by its estimate) by the
  shadow time or uses only `extra` processors (which it then takes from `extra`).

Run as a module it replays the first N cleaned jobs of an SWF trace and writes `job_id,start`
lines, so a benchmark can time it as a process and compare its start times with a replay's.
"""

from __future__ import annotations

import argparse
import heapq
import sys
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from hpcdispatch.sim_adapter.swf import CleaningStats, iter_jobs


@dataclass(slots=True)
class PlainJob:
    id: str
    submit: int
    width: int  # processors
    estimate: int  # requested time, seconds
    duration: int  # run time, at most the estimate (killed there)
    start: int = -1


def easy_starts(jobs: list[PlainJob], processors: int) -> None:
    """Set every job's start time by EASY backfilling on `processors` identical processors."""
    free = processors
    queue: deque[PlainJob] = deque()
    ends: list[tuple[int, int, int]] = []  # (actual end, seq, width) of running jobs
    running: dict[int, tuple[int, int]] = {}  # seq -> (estimated end, width)
    arrivals = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit, i))
    nxt = 0
    while nxt < len(arrivals) or queue:
        t_submit = jobs[arrivals[nxt]].submit if nxt < len(arrivals) else None
        t_end = ends[0][0] if ends else None
        candidates = [t for t in (t_submit, t_end) if t is not None]
        if not candidates:  # queued jobs that never fit
            break
        t = min(candidates)
        while ends and ends[0][0] <= t:  # releases first
            _, seq, width = heapq.heappop(ends)
            free += width
            del running[seq]
        while nxt < len(arrivals) and jobs[arrivals[nxt]].submit <= t:  # then submissions
            queue.append(jobs[arrivals[nxt]])
            nxt += 1
        free = _schedule(t, queue, free, ends, running, processors)


def _start(job: PlainJob, t: int, ends: list[tuple[int, int, int]],
           running: dict[int, tuple[int, int]], seq: int) -> None:
    job.start = t
    heapq.heappush(ends, (t + job.duration, seq, job.width))
    running[seq] = (t + job.estimate, job.width)


def _schedule(t: int, queue: deque[PlainJob], free: int, ends: list[tuple[int, int, int]],
              running: dict[int, tuple[int, int]], processors: int) -> int:
    while queue and queue[0].width <= free:  # the head starts while it fits
        job = queue.popleft()
        free -= job.width
        _start(job, t, ends, running, _unique(running))
    if not queue:
        return free
    head = queue[0]
    if head.width > processors:
        return free  # never fits; nothing is reserved for it
    # Shadow time: running jobs end by their estimates (never before t) until the head fits.
    available = free
    shadow, extra = t, 0
    for est_end, width in sorted(running.values()):
        available += width
        if available >= head.width:
            shadow, extra = max(est_end, t), available - head.width
            break
    for job in list(queue)[1:]:
        if job.width > free:
            continue
        if t + job.estimate <= shadow:
            pass
        elif job.width <= extra:
            extra -= job.width
        else:
            continue
        queue.remove(job)
        free -= job.width
        _start(job, t, ends, running, _unique(running))
    return free


_counter = [0]


def _unique(running: dict[int, tuple[int, int]]) -> int:
    """A key no running job has (the heap's tie-breaker and the running table's key)."""
    _counter[0] += 1
    return _counter[0]


def load_jobs(trace: Path, limit: int | None) -> tuple[list[PlainJob], CleaningStats]:
    stats = CleaningStats()
    jobs = [PlainJob(j.id, j.submit, j.width, j.requested_time, j.duration)
            for j in iter_jobs(trace, stats, limit)]
    return jobs, stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", required=True, type=Path)
    parser.add_argument("--processors", required=True, type=int)
    parser.add_argument("--limit-jobs", type=int, default=None)
    parser.add_argument("--out", type=Path, help="job_id,start lines (default: none)")
    args = parser.parse_args(argv)
    jobs, _ = load_jobs(args.trace, args.limit_jobs)
    easy_starts(jobs, args.processors)
    if args.out:
        args.out.write_text("".join(f"{j.id},{j.start}\n" for j in jobs))
    print(f"{len(jobs)} jobs", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
