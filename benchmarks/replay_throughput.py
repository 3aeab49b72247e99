"""Replay throughput: jobs per CPU-second of each dispatcher, side by side with a plain simulator.

Each replay runs as its own process (`hpcdispatch simulate`, wall-time estimates, deterministic
search), and its CPU time (user + system, from the operating system's accounting of the finished
child) and wall time are measured around it; the yardstick is `benchmarks.plain_easy`, a plain
event-driven EASY on processor counts, run the same way on the same jobs, and its start times are
compared with the replay's EASY job for job. Every row is measured in the same run, so the ratios
hold on a loaded machine where the seconds do not.

    python -m benchmarks.replay_throughput \\
        --trace sim_adapter/data/KTH-SP2-1996-2.1-cln.slice.swf.xz \\
        --limit-jobs 3000 --dispatchers easy,pcp20 --repeats 3

`--paths` names how the replay reaches the dispatcher: `grpc` (the embedded service on loopback,
through sessions: the default of `hpcdispatch simulate`) and, where `simulate` offers it,
`in-process` (the service's decision pipeline called directly).
"""

from __future__ import annotations

import argparse
import csv
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from hpcdispatch.sim_adapter.swf import read_header

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "hpcdispatch"]


@dataclass(frozen=True, slots=True)
class Timing:
    cpu: float  # user + system seconds of the child process
    wall: float


def timed(command: list[str]) -> Timing:
    """Run `command` to completion; its CPU and wall seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    subprocess.run(command, check=True, cwd=REPO, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timing(cpu, wall)


def simulate_command(trace: Path, limit: int, dispatcher: str, path: str, out: Path) -> list[str]:
    command = [*CLI, "simulate", "--trace", str(trace), "--limit-jobs", str(limit),
               "--dispatcher", dispatcher, "--predictor", "walltime", "--no-progress",
               "--out", str(out)]
    if path == "in-process":
        command.append("--in-process")
    return command


def simulate_offers(flag: str) -> bool:
    shown = subprocess.run([*CLI, "simulate", "--help"], capture_output=True, text=True,
                           cwd=REPO, check=True).stdout
    return flag in shown


def starts_of_replay(out: Path) -> dict[str, int]:
    (jobs_csv,) = out.glob("*/jobs.csv")
    with jobs_csv.open() as f:
        return {row["job_id"]: int(row["start"]) for row in csv.DictReader(f)}


def starts_of_plain(path: Path) -> dict[str, int]:
    return {job: int(start) for job, start in
            (line.split(",") for line in path.read_text().splitlines())}


def processors_of(trace: Path) -> int:
    header = read_header(trace)
    procs = header.max_procs or header.max_nodes
    if not procs:
        raise SystemExit(f"{trace}: the header names no MaxProcs / MaxNodes")
    return procs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, required=True)
    parser.add_argument("--limit-jobs", type=int, required=True)
    parser.add_argument("--dispatchers", default="easy,pcp20")
    parser.add_argument("--paths", default="grpc,in-process",
                        help="grpc, in-process (skipped where simulate lacks --in-process)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per row; medians shown")
    args = parser.parse_args(argv)
    trace = args.trace.resolve()
    paths = [p for p in args.paths.split(",")
             if p == "grpc" or (p == "in-process" and simulate_offers("--in-process"))]
    processors = processors_of(trace)
    rows: list[tuple[str, str, Timing]] = []
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        plain_out = scratch / "plain.csv"
        plain = [timed([sys.executable, "-m", "benchmarks.plain_easy", "--trace", str(trace),
                        "--processors", str(processors), "--limit-jobs", str(args.limit_jobs),
                        "--out", str(plain_out)]) for _ in range(args.repeats)]
        rows.append(("plain EASY (benchmarks.plain_easy)", "-", median(plain)))
        agreement: dict[str, str] = {}
        for path in paths:
            for dispatcher in args.dispatchers.split(","):
                runs = []
                for r in range(args.repeats):
                    out = scratch / f"{dispatcher}-{path}-{r}"
                    runs.append(timed(simulate_command(trace, args.limit_jobs, dispatcher,
                                                       path, out)))
                rows.append((dispatcher, path, median(runs)))
                if dispatcher == "easy":
                    ours = starts_of_replay(scratch / f"easy-{path}-0")
                    theirs = starts_of_plain(plain_out)
                    same = sum(ours.get(job) == start for job, start in theirs.items())
                    agreement[path] = f"{same}/{len(theirs)}"
    print(f"trace {trace.name}, first {args.limit_jobs} jobs, {processors} processors, "
          f"wall-time estimates; median of {args.repeats} runs each, one process per run")
    base = rows[0][2].cpu
    header = ("replay", "path", "CPU [s]", "wall [s]", "jobs / CPU-s", "CPU ÷ plain")
    table = [header] + [
        (name, path, f"{t.cpu:.2f}", f"{t.wall:.2f}", f"{args.limit_jobs / t.cpu:,.0f}",
         f"{t.cpu / base:.1f}×") for name, path, t in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    for where, equal in agreement.items():
        print(f"EASY start times equal to the plain simulator's ({where}): {equal} jobs")
    return 0


def median(runs: list[Timing]) -> Timing:
    return Timing(statistics.median(t.cpu for t in runs), statistics.median(t.wall for t in runs))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
