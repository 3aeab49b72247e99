"""Are a replay's outputs the same at two commits? Every dispatcher's jobs.csv, column by column.

Both commits are exported with `git archive` into a temporary directory and laid out as the
installed package (`benchmarks.scale.baseline_server`'s `export` and `package_tree`), and each
replay runs from there as its own process (`hpcdispatch simulate`, this interpreter, PYTHONPATH
on the export, wall-time estimates), so neither replay reads this checkout's code. For each
dispatcher and path the two jobs.csv are compared:

- **byte-identical**: the files are equal;
- **same on the old columns**: the newer one has columns the older one had not (*added*: a
  new output, not a difference) and every older column is equal on every job;
- **differs**: which columns differ, on how many jobs, with the first job's values; and the
  share of the jobs whose start is the same.

The CP dispatchers (hcp19, pcp19, pcp20; `pcp20@book` is PCP'20 with the `book` profile) are
made deterministic as `simulate` makes them by default: their search limits counted in
CP-SAT's deterministic time, one search worker, a fixed seed (`cp/cpsat_attempt.py`). What
still depends on the machine is a search that the call's wall-clock deadline cut short; the
server says so ("decision not reproducible" on stderr), and the harness counts those lines per
replay: a difference in a replay with such decisions may be the machine's, not the code's.

    python -m benchmarks.speed.identical_outputs --old 15941f5 --new 6f8a9b0 \\
        --trace kth-sp2-slice --dispatchers fcfs,easy,pcp20@book --paths in-process,grpc-stream \\
        --timeout 1200 --out benchmarks/results/speed/identical-outputs.md

`--paths`: `in-process` (`simulate --in-process`) and `grpc-stream` (`simulate`'s default: the
embedded service on loopback, a session stream). A replay past `--timeout` seconds is stopped
and reported as such. The markdown goes to `--out` (appended to, with the command), and to
stdout.
"""

from __future__ import annotations

import argparse
import csv
import os
import resource
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.scale.baseline_server import REPO, export, package_tree
from hpcdispatch.sim_adapter.replay import resolve_trace

PATH_FLAGS = {"in-process": ["--in-process"], "grpc-stream": []}
UNREPRODUCIBLE = "not reproducible"  # the server's warning for a deterministic search cut short
EXAMPLES = 1  # jobs shown per differing column


@dataclass(frozen=True, slots=True)
class Replay:
    """One finished (or stopped) replay of one commit."""

    jobs_csv: Path | None  # None: it did not finish
    cpu: float  # user + system seconds of the process
    wall: float
    unreproducible: int  # decisions the server said were not reproducible
    failure: str = ""  # why there is no jobs.csv


@dataclass(slots=True)
class Comparison:
    verdict: str
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    differing: dict[str, tuple[int, str]] = field(default_factory=dict)  # column: (jobs, e.g.)
    same_starts: str = ""


def dispatcher_flags(spec: str) -> list[str]:
    """`simulate`'s flags for a dispatcher spec: NAME or NAME@PROFILE."""
    name, _, profile = spec.partition("@")
    return ["--dispatcher", name] + (["--profile", profile] if profile else [])


def replay(tree: Path, trace: Path, spec: str, path: str, window: list[str], out: Path,
           timeout: float) -> Replay:
    """Run `simulate` from the export at `tree`; its jobs.csv, CPU and wall seconds."""
    command = [sys.executable, "-m", "hpcdispatch", "simulate", "--trace", str(trace),
               *window, *dispatcher_flags(spec), "--predictor", "walltime", "--no-progress",
               "--out", str(out), *PATH_FLAGS[path]]
    # Only the keys every version knows: an older config refuses unknown HPCDISPATCH_*.
    env = {k: v for k, v in os.environ.items() if not k.startswith("HPCDISPATCH_")}
    env.update(PYTHONPATH=str(tree), PYTHONHASHSEED="0")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.perf_counter()
    log = out.with_suffix(".stderr")
    out.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as err:
        # cwd: `python -m` puts it first on sys.path, so the export, not this checkout.
        proc = subprocess.Popen(command, cwd=tree, env=env, stdout=subprocess.DEVNULL,
                                stderr=err, start_new_session=True)
        try:
            code = proc.wait(timeout)
            failure = "" if code == 0 else f"exit {code}"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: the replay and its threads
            proc.wait()
            failure = f"stopped after {timeout:.0f} s"
    wall = time.perf_counter() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    text = log.read_text(errors="replace")
    if failure.startswith("exit"):
        failure += ": " + (text.strip().splitlines() or [""])[-1][:200]
    found = sorted(out.glob("*/jobs.csv"))
    return Replay(found[0] if found and not failure else None, cpu, wall,
                  text.count(UNREPRODUCIBLE), failure)


def rows_of(path: Path) -> tuple[list[str], dict[str, dict[str, str]], list[str]]:
    """jobs.csv's columns, its rows by job id, and the job ids in file order."""
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        columns = list(reader.fieldnames or [])
    return columns, {row["job_id"]: row for row in rows}, [row["job_id"] for row in rows]


def compare(old: Path, new: Path) -> Comparison:
    """Column by column, job by job (rows matched by job_id)."""
    if old.read_bytes() == new.read_bytes():
        return Comparison("byte-identical")
    old_columns, old_rows, old_order = rows_of(old)
    new_columns, new_rows, new_order = rows_of(new)
    result = Comparison("", added=[c for c in new_columns if c not in old_columns],
                        removed=[c for c in old_columns if c not in new_columns])
    shared = [c for c in old_columns if c in new_columns]
    jobs = [j for j in old_order if j in new_rows]
    for column in shared:
        unequal = [j for j in jobs if old_rows[j][column] != new_rows[j][column]]
        if unequal:
            shown = "; ".join(f"job {j}: {old_rows[j][column] or '(empty)'} → "
                              f"{new_rows[j][column] or '(empty)'}" for j in unequal[:EXAMPLES])
            result.differing[column] = (len(unequal), shown)
    only_old, only_new = set(old_rows) - set(new_rows), set(new_rows) - set(old_rows)
    if only_old or only_new:
        result.differing["(jobs)"] = (len(only_old) + len(only_new),
                                      f"{len(only_old)} only before, {len(only_new)} only after")
    if not result.differing and [j for j in old_order if j in new_rows] != \
            [j for j in new_order if j in old_rows]:
        result.differing["(row order)"] = (len(jobs), "the same rows in another order")
    same = sum(old_rows[j]["start"] == new_rows[j]["start"] for j in jobs)
    result.same_starts = f"{same}/{len(old_rows)} ({100 * same / max(len(old_rows), 1):.2f} %)"
    if result.differing:
        result.verdict = "**differs**: " + ", ".join(
            f"`{c}` on {n}" for c, (n, _) in result.differing.items())
    else:
        result.verdict = "same on the old columns"
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", required=True, help="the older commit")
    parser.add_argument("--new", default="HEAD", help="the newer commit (default: HEAD)")
    parser.add_argument("--trace", default="kth-sp2-slice",
                        help="a shipped trace's name (kth-sp2, kth-sp2-slice, ...) or an SWF file")
    parser.add_argument("--limit-jobs", type=int, help="the first N cleaned jobs only")
    parser.add_argument("--records", metavar="FIRST:LAST", help="job records FIRST..LAST-1 only")
    parser.add_argument("--dispatchers", required=True,
                        help="comma-separated NAME or NAME@PROFILE (pcp20@book)")
    parser.add_argument("--paths", default="in-process,grpc-stream",
                        help="in-process, grpc-stream")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per replay")
    parser.add_argument("--out", type=Path, help="markdown file to append the results to")
    args = parser.parse_args(argv)
    paths = args.paths.split(",")
    if unknown := [p for p in paths if p not in PATH_FLAGS]:
        parser.error(f"--paths: unknown {', '.join(unknown)} (known: {', '.join(PATH_FLAGS)})")
    trace = resolve_trace(args.trace).resolve()
    window = ((["--limit-jobs", str(args.limit_jobs)] if args.limit_jobs else [])
              + (["--records", args.records] if args.records else []))
    command = "python -m benchmarks.speed.identical_outputs " + shlex.join(
        argv if argv is not None else sys.argv[1:])
    lines = [f"`{command}`", ""]
    with tempfile.TemporaryDirectory(prefix="hpcdispatch-identical-") as tmp:
        scratch = Path(tmp)
        trees, fulls = {}, {}
        for code, rev in (("old", args.old), ("new", args.new)):
            fulls[code] = export(rev, scratch / f"{code}-source", REPO)
            trees[code] = package_tree(scratch / f"{code}-source", scratch / f"{code}-tree")
        lines += [f"trace `{trace.name}` {' '.join(window) or '(whole)'}, predictor walltime; "
                  f"old `{fulls['old'][:7]}`, new `{fulls['new'][:7]}`", "",
                  "| dispatcher | path | jobs.csv, new against old | same start | "
                  "not reproducible (old / new) | CPU old / new [s] |",
                  "|---|---|---|---|---|---|"]
        notes: list[str] = []
        for spec in args.dispatchers.split(","):
            for path in paths:
                runs = {code: replay(trees[code], trace, spec, path, window,
                                     scratch / f"{code}-{spec}-{path}", args.timeout)
                        for code in ("old", "new")}
                row = f"| `{spec}` | {path} | "
                cpu = f"{runs['old'].cpu:.1f} / {runs['new'].cpu:.1f}"
                cut = f"{runs['old'].unreproducible} / {runs['new'].unreproducible}"
                old_csv, new_csv = runs["old"].jobs_csv, runs["new"].jobs_csv
                if old_csv is None or new_csv is None:
                    why = "; ".join(f"{code}: {r.failure}" for code, r in runs.items()
                                    if r.failure)
                    row += f"not compared ({why}) | – | {cut} | {cpu} |"
                else:
                    result = compare(old_csv, new_csv)
                    verdict = result.verdict
                    if result.added:
                        verdict += f" (added: {', '.join(f'`{c}`' for c in result.added)})"
                    if result.removed:
                        verdict += f" (removed: {', '.join(f'`{c}`' for c in result.removed)})"
                    row += f"{verdict} | {result.same_starts or 'all'} | {cut} | {cpu} |"
                    notes += [f"- `{spec}` {path}, `{column}` on {n} jobs: {example}"
                              for column, (n, example) in result.differing.items()]
                lines.append(row)
                print(row, flush=True)
        if notes:
            lines += ["", "Differences (the first job of each column, old → new):", "", *notes]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("a") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
