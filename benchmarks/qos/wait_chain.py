"""Why a job waits longer in one replay than in another: the chain of jobs that held its nodes.

Reads the per-job records of two replays of the same trace (`jobs.csv` as written by
`hpcdispatch simulate` or a campaign: each job's submit, start, end, predicted run time and
nodes) and follows, from a job that starts later in RUN than in REFERENCE (by default RUN's
longest wait), the job that held its nodes last: of the jobs that ran on any of its nodes and
ended by its start, the one that ended last (ties: the one delayed most). While that job itself
started later than in REFERENCE the chain goes on from it; it ends at a job that did not start
later, which went ahead of the delayed one, or at a job with no occupant on its nodes.

    python -m benchmarks.qos.wait_chain runs/kth-oracle/01-easy runs/kth-oracle/02-pcp20
    python -m benchmarks.qos.wait_chain runs/lublin/01-easy runs/lublin/02-pcp20 --last-to-end

The same work over a longer makespan (first submit to last end) is a lower utilisation, so
`--last-to-end` starts the chain at the job that ends last, which sets the makespan.

Each link says how much later the job started than in REFERENCE, and for its last occupant: its
width, submit (before or after the job it kept out: after means it went ahead of it), start in
both runs and predicted against actual run time (an occupant that overran its prediction held a
reservation back that the dispatcher had counted on). Issue #24's closing notes use it to say why
a run's longest wait misses EASY's.
"""

from __future__ import annotations

import argparse
import csv
from dataclasses import dataclass
from pathlib import Path

from hpcdispatch.sim_adapter.records import JobRecord


@dataclass(frozen=True, slots=True)
class Link:
    """`job` started `delay` s later than in the reference; `occupant` held its nodes last."""

    job: JobRecord
    delay: int
    occupant: JobRecord | None
    occupant_delay: int  # how much later the occupant started than in the reference


Jobs = dict[str, JobRecord]  # by job id


def load_jobs(run: Path) -> Jobs:
    """The jobs of a run directory (or of a `jobs.csv` path) by job id."""
    path = run / "jobs.csv" if run.is_dir() else run
    with path.open(newline="") as handle:
        return {r["job_id"]: JobRecord(
                    id=r["job_id"], user=r["user"], submit=int(r["submit"]),
                    start=int(r["start"]), end=int(r["end"]),
                    requested_time=int(r["requested_time"]), predicted=int(r["predicted"]),
                    killed=r["killed"] == "1", units=int(r["units"]), cores=int(r["cores"]),
                    nodes=tuple(r["nodes"].split()))
                for r in csv.DictReader(handle)}


def longest_wait(jobs: Jobs) -> JobRecord:
    """The job that waits longest (ties: the first submitted)."""
    return max(jobs.values(), key=lambda j: (j.wait, -j.submit))  # ties: first in the file


def last_to_end(jobs: Jobs) -> JobRecord:
    """The job that ends last (ties: the last to start): it sets the makespan."""
    return max(jobs.values(), key=lambda j: (j.end, j.start))  # ties: first in the file


def makespan(jobs: Jobs) -> int:
    """First submit to last end, in seconds."""
    return max(j.end for j in jobs.values()) - min(j.submit for j in jobs.values())


def last_occupant(jobs: Jobs, job: JobRecord, reference: Jobs) -> JobRecord | None:
    """Of the other jobs on `job`'s nodes that ended by its start, the one that ended last
    (ties: the one that started latest relative to the reference)."""
    mine = set(job.nodes)
    before = [o for o in jobs.values()
              if o.id != job.id and o.end <= job.start and o.run > 0
              and not mine.isdisjoint(o.nodes)]
    if not before:
        return None
    return max(before, key=lambda o: (o.end, _delay(o, reference)))


def _delay(job: JobRecord, reference: Jobs) -> int:
    ref = reference.get(job.id)
    return 0 if ref is None else job.start - ref.start


def wait_chain(reference: Jobs, run: Jobs, job_id: str | None = None,
               limit: int = 20) -> list[Link]:
    """The chain from `job_id` (default: `run`'s longest wait), at most `limit` links, each
    one a job that started later than in `reference`; the last link's occupant did not (or is
    missing)."""
    job = run[job_id] if job_id is not None else longest_wait(run)
    if job.id not in reference:
        raise KeyError(f"job {job.id} is not in the reference run")
    chain: list[Link] = []
    seen: set[str] = set()
    while len(chain) < limit and job.id not in seen:
        seen.add(job.id)
        occupant = last_occupant(run, job, reference)
        occupant_delay = 0 if occupant is None else _delay(occupant, reference)
        chain.append(Link(job, _delay(job, reference), occupant, occupant_delay))
        if occupant is None or occupant_delay <= 0:
            break
        job = occupant
    return chain


def describe(link: Link, reference: Jobs) -> str:
    """One line of the chain, in words."""
    job, occupant = link.job, link.occupant
    head = (f"job {job.id} ({_nodes(job)}, waited {job.wait / 3600:.1f} h) "
            f"started {_signed(link.delay)} against the reference")
    if occupant is None:
        return head + "; no other job ran on its nodes before it"
    ref = reference.get(occupant.id)
    order = "after" if occupant.submit > job.submit else "before"
    return (f"{head}; its nodes were held last by job {occupant.id} ({_nodes(occupant)}, "
            f"submitted {abs(occupant.submit - job.submit):,} s {order} it, started "
            f"{occupant.start:,} here and {'–' if ref is None else f'{ref.start:,}'} in the "
            f"reference ({_signed(link.occupant_delay)}), ran {occupant.run:,} s, "
            f"predicted {occupant.predicted:,} s)")


def _nodes(job: JobRecord) -> str:
    return f"{len(job.nodes)} node{'' if len(job.nodes) == 1 else 's'}"


def _signed(seconds: int) -> str:
    return f"{'+' if seconds >= 0 else '−'}{abs(seconds):,} s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference", type=Path, help="the reference run (directory or jobs.csv)")
    parser.add_argument("run", type=Path, help="the run whose wait to explain")
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--job", help="the job id to start from (default: the run's longest "
                                     "wait)")
    start.add_argument("--last-to-end", action="store_true",
                       help="start from the job that ends last (it sets the makespan)")
    parser.add_argument("--limit", type=int, default=20, help="at most this many links "
                                                               "(default 20)")
    args = parser.parse_args(argv)
    if args.limit < 1:
        parser.error(f"--limit {args.limit}: at least 1")
    reference, run = load_jobs(args.reference), load_jobs(args.run)
    if args.job is not None and args.job not in run:
        parser.error(f"--job {args.job}: no such job in {args.run}")
    first = last_to_end(run).id if args.last_to_end else args.job
    try:
        chain = wait_chain(reference, run, first, args.limit)
    except KeyError as e:
        parser.error(str(e.args[0]))
    ref_longest, run_longest = longest_wait(reference), longest_wait(run)
    print(f"longest wait: {run_longest.wait / 3600:.1f} h (job {run_longest.id}) here, "
          f"{ref_longest.wait / 3600:.1f} h (job {ref_longest.id}) in the reference")
    here, there = makespan(run), makespan(reference)
    print(f"makespan: {here:,} s here, {there:,} s in the reference "
          f"({(here - there) / there:+.1%}); the last job to end is {last_to_end(run).id} "
          f"here, {last_to_end(reference).id} in the reference")
    for depth, link in enumerate(chain, 1):
        print(f"{depth}. {describe(link, reference)}")
    last = chain[-1]
    if last.occupant is not None and last.occupant_delay > 0:
        print(f"(chain cut at --limit {args.limit}: the last occupant started later too)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
