"""One run directory of the report, read back: its summary, its jobs and its decisions.

`report.find_runs` makes them and `report_plots` draws them: a module of its own, below both,
so that `report_plots` does not import `report`, which imports it.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .report_tables import run_name


@dataclass(frozen=True, slots=True)
class Run:
    path: Path
    summary: dict[str, Any]

    @property
    def label(self) -> str:
        return str(self.summary.get("label", self.path.name))

    @property
    def name(self) -> str:
        """The label, after the sequence id for a run of `--sequences`."""
        return run_name({"label": self.label, **self.summary})

    def decisions(self) -> tuple[list[float], list[int], list[float]]:
        """(times, queue lengths after each decision, decision seconds) from decisions.csv;
        empty without it. The queue after a decision (its queue_length, the queue it was
        asked about, less the jobs it started) is the queue until the next one."""
        times: list[float] = []
        queue: list[int] = []
        seconds: list[float] = []
        path = self.path / "decisions.csv"
        if not path.exists():
            return times, queue, seconds
        with path.open(newline="", encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                times.append(float(row["time"]))
                queue.append(max(int(row["queue_length"]) - int(row["started"] or 0), 0))
                seconds.append(float(row["decision_seconds"]))
        return times, queue, seconds

    def jobs(self) -> tuple[list[float], list[float]]:
        """(waits in seconds, bounded slowdowns) from jobs.csv; empty without it."""
        waits: list[float] = []
        slowdowns: list[float] = []
        path = self.path / "jobs.csv"
        if not path.exists():
            return waits, slowdowns
        with path.open(newline="", encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                waits.append(float(row["wait"]))
                slowdowns.append(float(row["bounded_slowdown"]))
        return waits, slowdowns

    def reported_starts(self) -> tuple[list[float], list[float], list[bool], list[float]]:
        """(the first promise, or for a job never promised its first estimate, and the actual
        start, both as waits in seconds since submission; whether it was a promise; the likely
        start beside the first promise as a wait, NaN where none) of each job of jobs.csv
        given a start while it waited; empty without them (a replay older than those columns,
        or a dispatcher that reports none)."""
        first: list[float] = []
        actual: list[float] = []
        promised: list[bool] = []
        likely: list[float] = []
        path = self.path / "jobs.csv"
        if not path.exists():
            return first, actual, promised, likely
        with path.open(newline="", encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                reported = row.get("first_promised_start") or row.get("first_reported_start")
                if not reported:
                    continue
                submit = float(row["submit"])
                first.append(float(reported) - submit)
                actual.append(float(row["start"]) - submit)
                promised.append(bool(row.get("first_promised_start")))
                beside = row.get("first_promised_likely_start")
                likely.append(float(beside) - submit if beside else math.nan)
        return first, actual, promised, likely
