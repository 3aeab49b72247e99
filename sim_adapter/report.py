"""Runs side by side: a comparison table and PNG plots.

A run directory holds `summary.json` (per-run figures), `jobs.csv` and `decisions.csv` (see
`outputs`). `find_runs` reads them as `report_run.Run`s (the tables in `report_tables`, the
plots in `report_plots`); the tail figures (p50 / p95 / p99 of wait and bounded slowdown) of a
run written before summary.json carried them are computed from its jobs.csv.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .outputs import INCOMPLETE, TAIL_QUANTILES, quantile
from .report_plots import write_plots
from .report_run import Run
from .report_tables import comparison_table, fixed_width
from .report_workload import (
    mixed_workloads_text,
    tag_workloads,
    with_profile_in_label,
    workloads,
)

__all__ = ["Run", "comparison_table", "find_runs", "fixed_width", "one_workload", "write_plots"]

SUMMARY = "summary.json"


def find_runs(paths: Iterable[Path]) -> list[Run]:
    """Run directories given directly, or found one level below a given directory, each
    labelled with its search profile (report_workload.with_profile_in_label). A given
    directory with no run (such as the `report/` folder an earlier report wrote, which a glob
    like `runs/kth/*` picks up) is skipped with a note on stderr, and so is a run that was
    interrupted (its INCOMPLETE says why); FileNotFoundError when a path does not exist or no
    run is found at all."""
    runs: list[Run] = []
    skipped: list[Path] = []
    incomplete: list[str] = []  # what the runs that were interrupted say of themselves
    for path in paths:
        if not path.exists():
            raise FileNotFoundError(f"{path}: no such file or directory")
        candidates = [path] if (path / SUMMARY).exists() else sorted(
            p for p in path.iterdir() if (p / SUMMARY).exists()
        ) if path.is_dir() else []
        stopped = [path] if (path / INCOMPLETE).exists() else sorted(
            p for p in path.iterdir() if (p / INCOMPLETE).exists()
        ) if path.is_dir() and not candidates else []
        incomplete += [_incomplete_note(run) for run in stopped]
        if not candidates and not stopped:
            skipped.append(path)
        for run in candidates:
            summary = json.loads((run / SUMMARY).read_text(encoding="utf-8"))
            runs.append(Run(run, with_profile_in_label(with_tails(summary, run / "jobs.csv"))))
    if not runs:
        raise FileNotFoundError("; ".join(incomplete) if incomplete else
                                f"{', '.join(map(str, skipped))}: no {SUMMARY} here or in "
                                "the subdirectories")
    for note in incomplete:
        print(f"note: {note}", file=sys.stderr)
    for path in skipped:
        print(f"note: skipped {path}: no {SUMMARY} there or one level below (not a run)",
              file=sys.stderr)
    return runs


def _incomplete_note(run: Path) -> str:
    """Why an interrupted run is not reported, from its INCOMPLETE file."""
    try:
        reason = str(json.loads((run / INCOMPLETE).read_text(encoding="utf-8"))["reason"])
    except (OSError, ValueError, KeyError, TypeError):
        reason = f"its replay did not finish ({INCOMPLETE} is unreadable)"
    return f"left out {run}: an incomplete run, {reason}; replay it again to report it"


def with_tails(summary: dict[str, Any], jobs_csv: Path) -> dict[str, Any]:
    """`summary` with the p50 / p95 / p99 of wait and bounded slowdown (and the longest
    wait) computed from `jobs_csv` where it has none of them."""
    figures = {"wait_seconds": "wait", "bounded_slowdown": "bounded_slowdown"}
    missing = [key for key in figures
               if not isinstance(summary.get(key), dict) or "p95" not in summary[key]]
    if not missing or not jobs_csv.exists():
        return summary
    columns: dict[str, list[float]] = {key: [] for key in missing}
    with jobs_csv.open(newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            for key in missing:
                columns[key].append(float(row[figures[key]]))
    completed = dict(summary)
    for key, values in columns.items():
        data = sorted(values)
        if not data:
            continue
        tails: dict[str, float] = {f"p{round(q * 100)}": quantile(data, q)
                                   for q in TAIL_QUANTILES}
        completed[key] = {"max": data[-1], **(summary.get(key) or {}), **tails}
    return completed


def one_workload(runs: list[Run], mixed: bool) -> tuple[list[str], list[Run]]:
    """(lines naming the runs' workload, the runs to report): one workload as it is; several
    refused with ValueError, or with `mixed` each run labelled with its workload's tag."""
    groups = workloads([r.summary for r in runs])
    if len(groups) == 1:
        return [f"workload: {next(iter(groups))}"], runs
    if not mixed:
        raise ValueError(mixed_workloads_text(groups))
    legend, summaries = tag_workloads([r.summary for r in runs])
    return (["workloads (different: compare rows of one tag only):", *legend],
            [Run(r.path, s) for r, s in zip(runs, summaries, strict=True)])
