"""Run outputs: jobs.csv and decisions.csv written as the replay goes, summary.json at the end.

Per-job statistics are accumulated on the fly (Welford); for percentiles a replay keeps one
float per decision, two per job (wait and bounded slowdown), one per predicted job (the
accuracy distribution) and up to two per job given a start while it waited (how the promise or
estimate was kept: `PromiseAccuracy`) in memory.
"""

from __future__ import annotations

import csv
import json
import math
from array import array
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from .records import DecisionRecord, JobRecord

JOB_COLUMNS = (
    "job_id", "user", "submit", "start", "end", "wait", "run", "requested_time", "predicted",
    "killed", "slowdown", "bounded_slowdown", "units", "cores", "node_count", "nodes",
    # The first start a decision reported while the job waited, 1 if it was a promise (0 an
    # estimate), and the first promised start; empty where none was reported.
    "first_reported_start", "first_reported_promised", "first_promised_start",
    # The likely start reported beside the first promise (empty: none), and the promise's moves
    # later while the job waited: how many, their seconds in all, their reasons (space
    # separated PromiseMoveReason names in lower case, in order).
    "first_promised_likely_start", "promise_moves", "promise_moved_later_seconds",
    "promise_move_reasons",
    # The partitions the job was allowed (space separated; empty: any node).
    "partitions",
)
# The columns of the starts the decisions reported while jobs waited (the others say where and
# when each job ran).
REPORTED_START_COLUMNS = JOB_COLUMNS[
    JOB_COLUMNS.index("first_reported_start"):JOB_COLUMNS.index("partitions")]
DECISION_COLUMNS = (
    "time", "queue_length", "running_jobs", "dispatcher", "predictor", "profile", "attempts",
    "status", "model_variables", "model_constraints", "started", "decision_seconds",
    "roundtrip_seconds", "fallback_reason",
)
# Bins of actual / predicted run time: (upper edge, label), a value goes to the first bin whose
# edge it is below; exactly 1 (a perfect prediction) has a bin of its own.
RATIO_BINS = ((0.1, "<0.1"), (0.25, "0.1-0.25"), (0.5, "0.25-0.5"), (0.75, "0.5-0.75"),
              (1.0, "0.75-1"), (math.nextafter(1.0, 2.0), "1"), (2.0, "1-2"),
              (math.inf, ">=2"))


@dataclass(slots=True)
class Moments:
    """Running mean and standard deviation (Welford)."""

    n: int = 0
    mean: float = 0.0
    m2: float = 0.0
    maximum: float = -math.inf

    def add(self, x: float) -> None:
        self.n += 1
        delta = x - self.mean
        self.mean += delta / self.n
        self.m2 += delta * (x - self.mean)
        self.maximum = max(self.maximum, x)

    def as_dict(self) -> dict[str, float | None]:
        if not self.n:
            return {"mean": None, "std": None, "max": None}
        return {"mean": self.mean, "std": math.sqrt(self.m2 / self.n), "max": self.maximum}


def quantile(values: list[float], q: float) -> float:
    """Linear-interpolated quantile of sorted `values` (non-empty), q in [0, 1]."""
    pos = q * (len(values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


TAIL_QUANTILES = (0.5, 0.95, 0.99)  # of waits and bounded slowdowns in summary.json


def percentiles(values: array[float]) -> dict[str, float | None]:
    """p50, p95 and p99 of `values` (None for each when empty)."""
    data = sorted(values)
    return {f"p{round(q * 100)}": quantile(data, q) if data else None for q in TAIL_QUANTILES}


def distribution(values: array[float]) -> dict[str, float | int | None]:
    data = sorted(values)
    if not data:
        return {"count": 0, "mean": None, "p50": None, "p95": None, "p99": None, "max": None}
    return {
        "count": len(data), "mean": sum(data) / len(data), "p50": quantile(data, 0.5),
        "p95": quantile(data, 0.95), "p99": quantile(data, 0.99), "max": data[-1],
    }


@dataclass(slots=True)
class Accuracy:
    """Predicted d_i (JobStart.expected_duration) against the time the job really ran."""

    n: int = 0
    abs_error: float = 0.0
    under: int = 0  # predicted < actual
    over: int = 0  # predicted > actual
    ratios: array[float] = field(default_factory=lambda: array("d"))

    def add(self, predicted: int, actual: int) -> None:
        self.n += 1
        self.abs_error += abs(predicted - actual)
        if predicted < actual:
            self.under += 1
        elif predicted > actual:
            self.over += 1
        self.ratios.append(actual / predicted)

    def as_dict(self) -> dict[str, Any]:
        if not self.n:
            return {"jobs": 0}
        data = sorted(self.ratios)
        bins: Counter[str] = Counter()
        for r in data:
            bins[next(label for edge, label in RATIO_BINS if r < edge)] += 1
        return {
            "jobs": self.n,
            "mae_seconds": self.abs_error / self.n,
            "underestimation_rate": self.under / self.n,
            "overestimation_rate": self.over / self.n,
            "exact_rate": (self.n - self.under - self.over) / self.n,
            "actual_over_predicted": {
                "p5": quantile(data, 0.05), "p25": quantile(data, 0.25),
                "p50": quantile(data, 0.5), "p75": quantile(data, 0.75),
                "p95": quantile(data, 0.95), "mean": sum(data) / len(data),
                "bins": {label: bins.get(label, 0) for _, label in RATIO_BINS},
            },
        }


def tail(values: array[float]) -> dict[str, float | None]:
    """p50, p95 and the largest of `values` (None for each when empty)."""
    data = sorted(values)
    if not data:
        return {"p50": None, "p95": None, "max": None}
    return {"p50": quantile(data, 0.5), "p95": quantile(data, 0.95), "max": data[-1]}


HOUR = 3600  # seconds: a likely start this close to the actual one is "within 1 h"


@dataclass(slots=True)
class KeptStarts:
    """Jobs' first reported starts of one kind (promises, estimates, or the likely starts
    beside promises) against their actual starts: on time when the job started no later; else
    late by the difference; and the absolute error |actual - first| (`drift_seconds`: its p50
    is the median absolute error), within 1 h or not."""

    jobs: int = 0
    on_time: int = 0
    within_hour: int = 0
    late: array[float] = field(default_factory=lambda: array("d"))  # seconds, late jobs only
    drift: array[float] = field(default_factory=lambda: array("d"))  # |actual - first|

    def add(self, first: int, actual: int) -> None:
        self.jobs += 1
        if actual <= first:
            self.on_time += 1
        else:
            self.late.append(actual - first)
        self.drift.append(abs(actual - first))
        self.within_hour += abs(actual - first) <= HOUR

    def as_dict(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "on_time_share": self.on_time / self.jobs if self.jobs else None,
            "late_jobs": len(self.late),
            "late_seconds": tail(self.late),
            "drift_seconds": tail(self.drift),
            "within_hour_share": self.within_hour / self.jobs if self.jobs else None,
        }


@dataclass(slots=True)
class PromiseAccuracy:
    """How the starts the decisions reported were kept (summary.json `promise_accuracy`): a
    promised job against its first promise (`promised`: the share kept) and against the likely
    start beside it (`likely`: its error), a job never promised against its first estimate;
    and the promises moved later, by reason (`moved`)."""

    reported: int = 0
    promised: KeptStarts = field(default_factory=KeptStarts)
    likely: KeptStarts = field(default_factory=KeptStarts)
    estimated: KeptStarts = field(default_factory=KeptStarts)
    moved_jobs: int = 0
    moves: Counter[str] = field(default_factory=Counter)  # reason -> moves later

    def add(self, record: JobRecord) -> None:
        if record.first_reported_start is None:
            return
        self.reported += 1
        if record.first_promised_start is not None:
            self.promised.add(record.first_promised_start, record.start)
            if record.first_promised_likely_start is not None:
                self.likely.add(record.first_promised_likely_start, record.start)
        else:
            self.estimated.add(record.first_reported_start, record.start)
        self.moved_jobs += record.promise_moves > 0
        self.moves.update(reason or "unspecified" for reason in record.promise_move_reasons)

    def as_dict(self) -> dict[str, Any]:
        return {"reported_jobs": self.reported, "promised": self.promised.as_dict(),
                "likely": self.likely.as_dict(), "estimated": self.estimated.as_dict(),
                "moved": {"jobs": self.moved_jobs, "moves": sum(self.moves.values()),
                          "by_reason": dict(sorted(self.moves.items()))}}


def _blank(value: int | None) -> int | str:
    return "" if value is None else value


class BusyIntervals:
    """When each finished job held how many cores, and the submits' span: the share of the
    machine used between the first and the last arrival."""

    def __init__(self) -> None:
        self.starts: array[int] = array("q")
        self.ends: array[int] = array("q")
        self.cores: array[int] = array("q")
        self.first_submit: int | None = None
        self.last_submit: int | None = None

    def add(self, submit: int, start: int, end: int, cores: int) -> None:
        self.starts.append(start)
        self.ends.append(end)
        self.cores.append(cores)
        if self.first_submit is None or submit < self.first_submit:
            self.first_submit = submit
        if self.last_submit is None or submit > self.last_submit:
            self.last_submit = submit

    def arrival_window_share(self, total_cores: int) -> float | None:
        first, last = self.first_submit, self.last_submit
        if first is None or last is None or last <= first or total_cores <= 0:
            return None
        used = sum(c * max(0, min(e, last) - max(s, first))
                   for s, e, c in zip(self.starts, self.ends, self.cores, strict=True))
        return used / (total_cores * (last - first))


class RunRecorder:
    """ReplayObserver writing the CSV files (when `out_dir` is given) and summing up a run."""

    def __init__(self, out_dir: Path | None = None) -> None:
        self.out_dir = out_dir
        self.wait = Moments()
        self.slowdown = Moments()
        self.bounded_slowdown = Moments()
        self.waits: array[float] = array("d")  # for the percentiles
        self.bounded_slowdowns: array[float] = array("d")
        self.accuracy = Accuracy()
        self.promises = PromiseAccuracy()
        self.core_seconds = 0
        self.busy = BusyIntervals()  # for the utilisation over the arrival window
        self.killed = 0
        self.jobs = 0
        self.dropped: Counter[str] = Counter()
        self.decision_seconds: array[float] = array("d")
        self.roundtrip_seconds: array[float] = array("d")
        self.queue_length = Moments()
        self.statuses: Counter[str] = Counter()
        self.fallbacks = 0
        # Per partition (a job of several: their names joined by +): jobs and their waits.
        self.partition_waits: dict[str, array[float]] = {}
        self._files: list[IO[str]] = []
        self._jobs_csv: Any = None
        self._decisions_csv: Any = None
        if out_dir is not None:
            out_dir.mkdir(parents=True, exist_ok=True)
            self._jobs_csv = self._writer(out_dir / "jobs.csv", JOB_COLUMNS)
            self._decisions_csv = self._writer(out_dir / "decisions.csv", DECISION_COLUMNS)

    def _writer(self, path: Path, columns: tuple[str, ...]) -> Any:
        handle = path.open("w", newline="", encoding="utf-8")
        self._files.append(handle)
        writer = csv.writer(handle)
        writer.writerow(columns)
        return writer

    def job_finished(self, record: JobRecord) -> None:
        self.jobs += 1
        self.wait.add(record.wait)
        self.slowdown.add(record.slowdown)
        self.bounded_slowdown.add(record.bounded_slowdown)
        self.waits.append(record.wait)
        self.bounded_slowdowns.append(record.bounded_slowdown)
        self.core_seconds += record.cores * record.run
        self.busy.add(record.submit, record.start, record.end, record.cores)
        self.killed += record.killed
        if record.predicted > 0:
            self.accuracy.add(record.predicted, record.run)
        self.promises.add(record)
        if record.partitions:
            self.partition_waits.setdefault("+".join(record.partitions),
                                            array("d")).append(record.wait)
        if self._jobs_csv is not None:
            reported = record.first_reported_start
            self._jobs_csv.writerow((
                record.id, record.user, record.submit, record.start, record.end, record.wait,
                record.run, record.requested_time, record.predicted, int(record.killed),
                f"{record.slowdown:.6g}", f"{record.bounded_slowdown:.6g}", record.units,
                record.cores, len(record.nodes), " ".join(record.nodes), _blank(reported),
                "" if reported is None else int(record.first_reported_promised),
                _blank(record.first_promised_start), _blank(record.first_promised_likely_start),
                record.promise_moves, record.promise_moved_later_seconds,
                " ".join(record.promise_move_reasons), " ".join(record.partitions),
            ))

    def decision_made(self, record: DecisionRecord) -> None:
        self.decision_seconds.append(record.decision_seconds)
        self.roundtrip_seconds.append(record.roundtrip_seconds)
        self.queue_length.add(record.queue_length)
        self.statuses[record.status] += 1
        self.fallbacks += bool(record.fallback_reason)
        if self._decisions_csv is not None:
            self._decisions_csv.writerow((
                record.time, record.queue_length, record.running_jobs, record.dispatcher,
                record.predictor, record.profile, record.attempts, record.status,
                record.variables, record.constraints, record.started,
                f"{record.decision_seconds:.6f}", f"{record.roundtrip_seconds:.6f}",
                record.fallback_reason,
            ))

    def job_dropped(self, reason: str) -> None:
        self.dropped[reason] += 1

    def close(self) -> None:
        for handle in self._files:
            handle.close()
        self._files.clear()

    def summary(
        self, *, first_submit: int | None, last_end: int | None, total_cores: int,
        replay_seconds: float, meta: dict[str, Any], cleaning: dict[str, Any],
    ) -> dict[str, Any]:
        """The run's JSON summary (see docs in the module docstring of `report`)."""
        makespan = (last_end - first_submit) if first_submit is not None and last_end else 0
        utilisation = (self.core_seconds / (total_cores * makespan)
                       if makespan > 0 and total_cores > 0 else None)
        return {
            **meta,
            "jobs": self.jobs,
            "killed_jobs": self.killed,
            "wait_seconds": {**self.wait.as_dict(), **percentiles(self.waits)},
            "slowdown": self.slowdown.as_dict(),
            "bounded_slowdown": {**self.bounded_slowdown.as_dict(),
                                 **percentiles(self.bounded_slowdowns)},
            "utilisation": utilisation,
            # Over the arrival window, first to last submit: on a short sequence the
            # makespan's is mostly the drain after the last arrival.
            "utilisation_arrival_window": self.busy.arrival_window_share(total_cores),
            "makespan_seconds": makespan,
            "first_submit": first_submit,
            "last_end": last_end,
            "decisions": len(self.decision_seconds),
            "decision_seconds": distribution(self.decision_seconds),
            "roundtrip_seconds": distribution(self.roundtrip_seconds),
            "decision_statuses": dict(sorted(self.statuses.items())),
            "fallback_decisions": self.fallbacks,
            "queue_length": self.queue_length.as_dict(),
            "replay_seconds": replay_seconds,
            "predictor_accuracy": self.accuracy.as_dict(),
            "promise_accuracy": self.promises.as_dict(),
            "cleaning": cleaning,
            "dropped_in_replay": dict(sorted(self.dropped.items())),
            # Jobs and their waits per partition (on a system with partitions only).
            **({"partitions": {name: {"jobs": len(waits), "wait_seconds": distribution(waits)}
                               for name, waits in sorted(self.partition_waits.items())}}
               if self.partition_waits else {}),
        }


# In a run folder whose replay was interrupted, in place of summary.json (replay.write_incomplete).
INCOMPLETE = "incomplete.json"


def write_summary(path: Path, summary: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
