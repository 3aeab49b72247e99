"""Idle capacity of replays: how much of the machine stayed idle while a queued job would fit.

Reads the per-job records of replay runs (`jobs.csv` and `summary.json` as written by
`hpcdispatch simulate` or a campaign) and, between consecutive events (a submit, start or end),
adds up the idle cores, and the idle cores while some queued job asked for no more cores than
were idle. The fit test is on pooled cores, exact on one-core nodes (KTH-SP2, lublin_256) and
optimistic on wider ones. A work-conserving dispatcher with no reservation would score 0 on the
second measure; EASY's share is what its head reservation holds back.

    python -m benchmarks.qos.idle_capacity runs/lublin-walltime/01-easy \\
        runs/lublin-walltime/02-pcp20
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np


def idle_shares(run: Path) -> tuple[float, float]:
    """(idle share, idle-while-a-queued-job-fits share) of the run's cores over its makespan."""
    with (run / "jobs.csv").open(newline="") as handle:
        rows = [(int(r["submit"]), int(r["start"]), int(r["end"]), int(r["cores"]))
                for r in csv.DictReader(handle)]
    submit, start, end, size = (np.asarray(col, dtype=np.int64) for col in zip(*rows, strict=True))
    cores = int(json.loads((run / "summary.json").read_text())["system"]["cores"])
    events = np.unique(np.concatenate([submit, start, end]))
    change = np.zeros(len(events), dtype=np.int64)
    np.add.at(change, np.searchsorted(events, start), size)
    np.add.at(change, np.searchsorted(events, end), -size)
    busy = np.cumsum(change)
    # The smallest request among the jobs queued in each interval [events[k], events[k+1]).
    smallest = np.full(len(events), np.iinfo(np.int64).max)
    for q, s, c in zip(submit.tolist(), start.tolist(), size.tolist(), strict=True):
        a, b = np.searchsorted(events, q), np.searchsorted(events, s)
        if b > a:
            np.minimum(smallest[a:b], c, out=smallest[a:b])
    span = np.diff(events)
    idle = (cores - busy[:-1]) * span
    total = float(cores * (events[-1] - events[0]))
    fits = smallest[:-1] <= cores - busy[:-1]
    return float(idle.sum()) / total, float(idle[fits].sum()) / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories (with jobs.csv)")
    args = parser.parse_args()
    print("| run | idle | idle while a queued job fits |")
    print("|---|---|---|")
    for run in args.runs:
        idle, idle_fit = idle_shares(run)
        print(f"| {run} | {idle:.3f} | {idle_fit:.3f} |")


if __name__ == "__main__":
    main()
