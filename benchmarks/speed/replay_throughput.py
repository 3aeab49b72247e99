"""Replay throughput: jobs per CPU-second of each dispatcher, side by side with a plain simulator.

Each replay runs as its own process (`hpcdispatch simulate`, wall-time estimates, deterministic
search), and its CPU time (user + system, from the operating system's accounting of the finished
child) and wall time are measured around it; "replay CPU" is the part spent in the replay itself
(summary.json's `replay_cpu_seconds`: the process less its start-up and imports). The yardstick
is `benchmarks.speed.plain_easy`, a plain event-driven EASY on processor counts, run the same way on
the same jobs, and its start times are compared with the replay's EASY job for job. Every row
is measured in the same run, so the ratios hold on a loaded machine where the seconds do not.

    python -m benchmarks.speed.replay_throughput --trace kth-sp2 --limit-jobs 5000 \\
        --dispatchers easy,pcp20 --repeats 3 --before /path/to/old/checkout/.venv/bin/python

`--paths` names how the replay reaches the dispatcher: `grpc-stream` (the embedded service on
loopback, a session stream fed the simulator's changes: the default of `hpcdispatch simulate`),
`grpc-unary` (the same service, the session's unary calls: `--unary-sessions`), `grpc`
(whatever `simulate` does by default: a `--before` checkout's own gRPC path) and, where
`simulate` offers it, `in-process` (the service's decision pipeline called directly). *CPU ÷
in-process* divides each row by its dispatcher's `now` in-process row. `--before` adds the rows of
another checkout (its interpreter, e.g. the code before a change) on the same paths, run in
the same way in the same run, each before row just before its `now` row; every replay's
jobs.csv is compared with the first row's of its dispatcher, byte for byte. `--predictor`
replays under another predictor than wall time.
"""

from __future__ import annotations

import argparse
import csv
import filecmp
import functools
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from hpcdispatch.sim_adapter.replay import resolve_trace
from hpcdispatch.sim_adapter.swf import read_header

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "hpcdispatch"]


@dataclass(frozen=True, slots=True)
class Timing:
    cpu: float  # user + system seconds of the child process
    wall: float


def checkout_of(python: str) -> Path:
    """The checkout whose venv holds `python` (CHECKOUT/.venv/bin/python), else this one: a
    replay runs in its own checkout, whose package folders would otherwise shadow its code."""
    checkout = Path(python).parent.parent.parent
    return checkout if (checkout / "pyproject.toml").exists() else REPO


def timed(command: list[str]) -> Timing:
    """Run `command` (its interpreter first) to completion; its CPU and wall seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    subprocess.run(command, check=True, cwd=checkout_of(command[0]), stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE)
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timing(cpu, wall)


def simulate_command(trace: Path, limit: int, dispatcher: str, path: str, out: Path,
                     python: str = sys.executable, predictor: str = "walltime") -> list[str]:
    command = [python, "-m", "hpcdispatch", "simulate", "--trace", str(trace),
               "--limit-jobs", str(limit),
               "--dispatcher", dispatcher, "--predictor", predictor, "--no-progress",
               "--out", str(out)]
    if path in PATH_FLAGS and simulate_offers(PATH_FLAGS[path], python):
        command.append(PATH_FLAGS[path])
    return command


# The `simulate` flag of each path ("grpc-stream" and "grpc" are its default).
PATH_FLAGS = {"in-process": "--in-process", "grpc-unary": "--unary-sessions"}
# The flag a checkout's `simulate` must offer for the path to be run with it: streams came
# with --unary-sessions; a checkout without the flag replays grpc-unary by default.
PATH_NEEDS = {"in-process": "--in-process", "grpc-stream": "--unary-sessions"}


def simulate_offers(flag: str, python: str = sys.executable) -> bool:
    return flag in _simulate_help(python)


@functools.cache
def _simulate_help(python: str) -> str:
    return subprocess.run([python, "-m", "hpcdispatch", "simulate", "--help"],
                          capture_output=True, text=True, cwd=checkout_of(python),
                          check=True).stdout


def replay_cpu(out: Path) -> float | None:
    """summary.json's replay CPU seconds (None where the replay's code does not record it)."""
    (summary,) = out.glob("*/summary.json")
    value = json.loads(summary.read_text()).get("replay_cpu_seconds")
    return None if value is None else float(value)


def simulated_seconds(out: Path) -> float:
    """The simulated span of a replay: first submission to last end (summary.json)."""
    (summary,) = out.glob("*/summary.json")
    data = json.loads(summary.read_text())
    return float(data["last_end"] - data["first_submit"])


def jobs_csv(out: Path) -> Path:
    (path,) = out.glob("*/jobs.csv")
    return path


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
    parser.add_argument("--trace", required=True,
                        help="a shipped trace's name (kth-sp2, llnl-atlas, lublin-256, "
                        "kth-sp2-slice) or an SWF file")
    parser.add_argument("--limit-jobs", type=int, required=True)
    parser.add_argument("--dispatchers", default="easy,pcp20")
    parser.add_argument("--paths", default="grpc-unary,grpc-stream,in-process",
                        help="grpc-stream, grpc-unary, grpc, in-process (each skipped where "
                        "simulate lacks it)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per row; medians shown")
    parser.add_argument("--before", metavar="PYTHON",
                        help="interpreter of another checkout: its replays as rows too")
    parser.add_argument("--predictor", default="walltime")
    args = parser.parse_args(argv)
    trace = resolve_trace(args.trace).resolve()
    paths = [p for p in args.paths.split(",")
             if p not in PATH_NEEDS or simulate_offers(PATH_NEEDS[p])]
    # (row name, interpreter, path) of every replay row, each --before row before its own.
    variants = []
    for path in paths:
        if args.before and (path not in PATH_NEEDS
                            or simulate_offers(PATH_NEEDS[path], args.before)):
            variants.append(("before", args.before, path))
        variants.append(("now", sys.executable, path))
    processors = processors_of(trace)
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        plain_out = scratch / "plain.csv"
        plain = [timed([sys.executable, "-m", "benchmarks.speed.plain_easy", "--trace", str(trace),
                        "--processors", str(processors), "--limit-jobs", str(args.limit_jobs),
                        "--out", str(plain_out)]) for _ in range(args.repeats)]
        rows: list[tuple[str, str, Timing, float | None]] = [
            ("plain EASY (benchmarks.speed.plain_easy)", "-", median(plain), None)]
        spans: list[float] = [0.0]
        agreement: dict[str, str] = {}
        identical: dict[str, str] = {}
        dispatchers = args.dispatchers.split(",")
        runs: dict[tuple[str, str, str], list[Timing]] = {}
        cpus: dict[tuple[str, str, str], list[float | None]] = {}
        # Round by round, every row once per round (a before row next to its now row), so
        # that the machine's load drifts over all rows alike.
        for r in range(args.repeats):
            for dispatcher in dispatchers:
                for code, python, path in variants:
                    out = scratch / f"{dispatcher}-{code}-{path}-{r}"
                    key = (dispatcher, code, path)
                    runs.setdefault(key, []).append(timed(simulate_command(
                        trace, args.limit_jobs, dispatcher, path, out, python, args.predictor)))
                    cpus.setdefault(key, []).append(replay_cpu(out))
        for dispatcher in dispatchers:
            for code, _, path in variants:
                key = (dispatcher, code, path)
                span = simulated_seconds(scratch / f"{dispatcher}-{code}-{path}-0")
                known = [c for c in cpus[key] if c is not None]
                rows.append((f"{dispatcher} ({code})", path, median(runs[key]),
                             statistics.median(known) if known else None))
                spans.append(span)
                first = scratch / f"{dispatcher}-{variants[0][0]}-{variants[0][2]}-0"
                if first != scratch / f"{dispatcher}-{code}-{path}-0":
                    same = filecmp.cmp(jobs_csv(first), jobs_csv(scratch / f"{dispatcher}-"
                                                                  f"{code}-{path}-0"),
                                       shallow=False)
                    identical[f"{dispatcher} {code} {path}"] = "identical" if same else "DIFFER"
                if dispatcher == "easy":
                    ours = starts_of_replay(scratch / f"easy-{code}-{path}-0")
                    theirs = starts_of_plain(plain_out)
                    same_starts = sum(ours.get(job) == start for job, start in theirs.items())
                    agreement[f"{code} {path}"] = f"{same_starts}/{len(theirs)}"
    print(f"trace {trace.name}, first {args.limit_jobs} jobs, {processors} processors, "
          f"predictor {args.predictor}; median of {args.repeats} runs each, one process per run")
    base = rows[0][2].cpu
    easy = {path: t.cpu for name, path, t, _ in rows if name.startswith("easy (now)")}
    in_process = {name.split(" (")[0]: t.cpu for name, path, t, _ in rows
                  if path == "in-process" and name.endswith("(now)")}
    header = ("replay", "path", "CPU [s]", "wall [s]", "replay CPU [s]", "jobs / CPU-s",
              "sim. days / CPU-h", "CPU ÷ plain", "replay CPU ÷ plain", "CPU ÷ in-process",
              "CPU ÷ easy (now)")
    table = [header] + [
        (name, path, f"{t.cpu:.2f}", f"{t.wall:.2f}", "-" if own is None else f"{own:.2f}",
         f"{args.limit_jobs / t.cpu:,.0f}",
         f"{span / 86_400 / (t.cpu / 3600):,.0f}" if span else "-",
         f"{t.cpu / base:.1f}×", "-" if own is None else f"{own / base:.1f}×",
         f"{t.cpu / in_process[name.split(' (')[0]]:.2f}×"
         if name.split(" (")[0] in in_process else "-",
         f"{t.cpu / easy[path]:.2f}×" if path in easy else "-")
        for (name, path, t, own), span in zip(rows, spans, strict=True)]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)))
    for where, equal in agreement.items():
        print(f"EASY start times equal to the plain simulator's ({where}): {equal} jobs")
    for what, verdict in identical.items():
        print(f"jobs.csv of {what} against {variants[0][0]} {variants[0][2]}: {verdict}")
    return 0


def median(runs: list[Timing]) -> Timing:
    return Timing(statistics.median(t.cpu for t in runs), statistics.median(t.wall for t in runs))


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    raise SystemExit(main())
