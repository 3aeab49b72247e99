"""Waits by job width: who waits longer in one replay than in another.

A mean hides who pays for it: serving narrow jobs first lowers the mean bounded slowdown and
pushes wide jobs back. This reads the per-job records of replay runs (`jobs.csv` and
`summary.json` as `hpcdispatch simulate` or a campaign writes them) and prints, side by side,
the jobs, mean and longest wait of each width class — the share of the machine's cores a job
asks for: one core, up to 1 %, 1–10 %, 10–25 %, 25–50 %, over half.

    python -m benchmarks.qos.waits_by_width runs/kth/01-easy runs/kth/02-pcp20 [--markdown]
"""

from __future__ import annotations

import argparse
import csv
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

# Upper bounds of the width classes, as a share of the machine's cores (the first: one core).
SHARES = (0.01, 0.10, 0.25, 0.50, 1.00)


@dataclass(frozen=True, slots=True)
class WidthClass:
    label: str
    jobs: int
    mean_wait_h: float
    max_wait_h: float


def width_label(cores: int, machine: int) -> str:
    """The class of a job asking for `cores` of a machine of `machine` cores."""
    if cores <= 1:
        return "1 core"
    share = cores / machine
    low = 0.0
    for high in SHARES:
        if share <= high:
            return f"{low:.0%}-{high:.0%}" if low else f"<= {high:.0%}"
        low = high
    return f"> {SHARES[-1]:.0%}"  # more than the machine: never in a valid replay


def classes(run: Path) -> list[WidthClass]:
    """The run's jobs by width class, narrowest first."""
    machine = int(json.loads((run / "summary.json").read_text())["system"]["cores"])
    waits: dict[str, list[int]] = {}
    with (run / "jobs.csv").open(newline="") as handle:
        for row in csv.DictReader(handle):
            waits.setdefault(width_label(int(row["cores"]), machine), []).append(int(row["wait"]))
    order = ["1 core", *(width_label(max(2, round(s * machine)), machine) for s in SHARES)]
    return [WidthClass(label, len(w), sum(w) / len(w) / 3600, max(w) / 3600)
            for label in dict.fromkeys(order) if (w := waits.get(label))]


def table(runs: Sequence[Path], markdown: bool = False) -> str:
    """One row per width class, mean / longest wait of each run side by side."""
    per_run = [{c.label: c for c in classes(run)} for run in runs]
    labels = list(dict.fromkeys(label for found in per_run for label in found))
    names = [run.name for run in runs]
    if len(set(names)) < len(names):  # e.g. 01-pcp20 of two campaigns: name the folder too
        names = [f"{run.parent.name}/{run.name}" for run in runs]
    header = ["width (share of cores)", "jobs", *(f"{n} mean / max wait [h]" for n in names)]
    rows = []
    for label in labels:
        jobs = next(found[label].jobs for found in per_run if label in found)
        cells = [f"{found[label].mean_wait_h:.2f} / {found[label].max_wait_h:.1f}"
                 if label in found else "-" for found in per_run]
        rows.append([label, f"{jobs:,}", *cells])
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(str(r[k])) for r in [header, *rows]) for k in range(len(header))]
    return "\n".join("  ".join(str(c).rjust(w) for c, w in zip(r, widths, strict=True))
                     for r in [header, *rows])


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.qos.waits_by_width",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path, help="run folders (jobs.csv, summary.json)")
    p.add_argument("--markdown", action="store_true", help="a Markdown table")
    args = p.parse_args(argv)
    print(table(args.runs, args.markdown))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
