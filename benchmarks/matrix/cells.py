"""What a campaign worker runs: one cell = one replay, returned to the client as plain data.

This module is sent to the Dask workers by value (cloudpickle), so workers need only the
installed `hpcdispatch` package (the same version as the client), not this repository. It
imports nothing from `benchmarks` for that reason. Results travel back as dicts and bytes:
the summary, and the run's files gzip-compressed, so the client can write them under its
`--out` without a shared filesystem.
"""

from __future__ import annotations

import gzip
import json
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, NotRequired, TypedDict

from hpcdispatch.sim_adapter.outputs import write_summary
from hpcdispatch.sim_adapter.replay import bundled_trace
from hpcdispatch.sim_adapter.workload import UnitMode

BUNDLED = "bundled"  # trace word: the slice shipped inside hpcdispatch (on every worker)
RUN_FILES = ("summary.json", "jobs.csv", "decisions.csv")


class CellSpec(TypedDict):
    """One replay of the matrix; every value plain so it pickles anywhere."""

    name: str  # directory name under --out, unique in the campaign
    trace: str  # as given: a path, or BUNDLED
    trace_file: str  # file name the shipped trace is written under on the worker
    system: str | None  # preset, file, NODESxCORES; None = from the trace header
    dispatcher: str
    predictor: str
    profile: str  # "" = the server's default (or not applicable)
    allocator: str
    unit_mode: UnitMode
    proc_scale: float  # cores per trace processor (hpcdispatch simulate --proc-scale)
    accelerator_share: float  # share of small jobs asking for GPUs / MICs
    limit_jobs: int | None
    charge_decision_time: bool
    timeout: float
    target: str | None  # host:port of a running service; None = embedded on loopback
    # Optional (campaigns written before them lack them): a record window "FIRST:LAST" of
    # `hpcdispatch simulate --records`; RLScheduler's protocol (`--sequences N`, one cell
    # replays all N, see `sequence_summary`); CP search limits in wall-clock time.
    records: NotRequired[str | None]
    sequences: NotRequired[int | None]
    sequence_length: NotRequired[int]
    seed: NotRequired[int]
    wall_clock_search: NotRequired[bool]
    # Drive an embedded gRPC service instead of the pipeline in-process (without `target`).
    grpc: NotRequired[bool]
    # SearchParameters fields over the profile's (`simulate --search KEY=VALUE`): a rung of the
    # promise book's ladder is {"promise_after_s": seconds}.
    search: NotRequired[dict[str, int | bool]]


class CellResult(TypedDict):
    """A cell's outcome: `summary` and `files` when it ran, `error` when it did not."""

    name: str
    host: str
    worker: str
    seconds: float  # wall time of the cell on its worker, server start included
    summary: dict[str, Any] | None
    files: dict[str, bytes]  # file name -> gzip-compressed content
    error: str | None
    traceback: str | None


def _worker_address() -> str:
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):
        return ""


def _trace_path(cell: CellSpec, trace_data: bytes | None, scratch: Path) -> Path:
    """The shipped copy if the client sent one; else the bundled slice or the worker's path."""
    if trace_data is not None:
        path = scratch / cell["trace_file"]
        path.write_bytes(trace_data)
        return path
    if cell["trace"] == BUNDLED:
        return bundled_trace()
    return Path(cell["trace"])


def simulate_command(cell: CellSpec, trace: Path | None, out: Path) -> list[str]:
    """`hpcdispatch simulate` for one cell (trace None: the bundled slice)."""
    command = [sys.executable, "-m", "hpcdispatch", "simulate",
               "--dispatcher", cell["dispatcher"], "--predictor", cell["predictor"],
               "--allocator", cell["allocator"], "--unit-mode", cell["unit_mode"],
               "--proc-scale", str(cell["proc_scale"]),
               "--accelerator-share", str(cell["accelerator_share"]),
               "--timeout", str(cell["timeout"]), "--out", str(out), "--no-progress"]
    options: list[tuple[str, object]] = [
        ("--trace", trace), ("--system", cell["system"]), ("--profile", cell["profile"]),
        ("--target", cell["target"]), ("--limit-jobs", cell["limit_jobs"]),
        ("--records", cell.get("records")), ("--sequences", cell.get("sequences")),
    ]
    if cell.get("sequences"):
        options += [("--sequence-length", cell.get("sequence_length", 1024)),
                    ("--seed", cell.get("seed", 1))]
    command += [part for flag, value in options if value not in (None, "")
                for part in (flag, str(value))]
    if cell["charge_decision_time"]:
        command.append("--charge-decision-time")
    if cell.get("wall_clock_search"):
        command.append("--wall-clock-search")
    for key, value in (cell.get("search") or {}).items():
        command += ["--search", f"{key}={str(value).lower()}"]
    if not cell["target"] and not cell.get("grpc"):
        command.append("--in-process")
    return command


def _stat(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "std": None, "max": None}
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else 0.0
    return {"mean": mean, "std": var ** 0.5, "max": max(values)}


def _numbers(summaries: list[dict[str, Any]], group: str, stat: str | None) -> list[float]:
    out = []
    for s in summaries:
        value = s.get(group) if stat is None else (s.get(group) or {}).get(stat)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out.append(float(value))
    return out


def _promise_accuracy(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """The sequences' promise accuracy together: jobs and late jobs summed, the share on time
    of the sum; lateness and drift percentiles the mean over the sequences of each one's,
    `max` the largest."""
    merged: dict[str, Any] = {"reported_jobs": sum(
        int((s.get("promise_accuracy") or {}).get("reported_jobs") or 0) for s in summaries)}
    for kind in ("promised", "estimated"):
        parts = [((s.get("promise_accuracy") or {}).get(kind) or {}) for s in summaries]
        jobs = sum(int(p.get("jobs") or 0) for p in parts)
        late = sum(int(p.get("late_jobs") or 0) for p in parts)
        merged[kind] = {"jobs": jobs, "late_jobs": late,
                        "on_time_share": (jobs - late) / jobs if jobs else None}
        for spread in ("late_seconds", "drift_seconds"):
            values = {stat: [float(v) for p in parts
                             if isinstance(v := (p.get(spread) or {}).get(stat), int | float)]
                      for stat in ("p50", "p95", "max")}
            merged[kind][spread] = {
                "p50": _stat(values["p50"])["mean"], "p95": _stat(values["p95"])["mean"],
                "max": max(values["max"], default=None)}
    return merged


def sequence_summary(summaries: list[dict[str, Any]]) -> dict[str, Any]:
    """One summary for a cell's RLScheduler sequences, shaped as a run's summary: per figure
    the mean over the sequences of each sequence's value, `std` the sample standard deviation
    of those values over the sequences (not over jobs), `max` the largest; `jobs`,
    `decisions` and `replay_seconds` summed. `sequences.runs` keeps each sequence's figures."""
    first = summaries[0]
    merged = dict(first)
    merged.update({
        "jobs": sum(int(s.get("jobs", 0)) for s in summaries),
        "decisions": sum(int(s.get("decisions", 0)) for s in summaries),
        "replay_seconds": sum(_numbers(summaries, "replay_seconds", None)),
        "records": None,
        "utilisation": _stat(_numbers(summaries, "utilisation", None))["mean"],
        "utilisation_arrival_window": _stat(
            _numbers(summaries, "utilisation_arrival_window", None))["mean"],
    })
    for group in ("slowdown", "bounded_slowdown", "wait_seconds"):
        merged[group] = _stat(_numbers(summaries, group, "mean"))
        merged[group]["max"] = max(_numbers(summaries, group, "max"), default=None)
        for tail in ("p95", "p99"):  # the mean over the sequences of each one's percentile
            values = _numbers(summaries, group, tail)
            merged[group][tail] = _stat(values)["mean"] if values else None
    merged["decision_seconds"] = {
        stat: _stat(_numbers(summaries, "decision_seconds", stat))["mean"]
        for stat in ("mean", "p50", "p95", "p99")}
    merged["decision_seconds"]["max"] = max(_numbers(summaries, "decision_seconds", "max"),
                                            default=None)
    merged["promise_accuracy"] = _promise_accuracy(summaries)
    described = first.get("sequence") or {}
    merged.pop("sequence", None)
    merged["sequences"] = {
        "count": len(summaries), "length": described.get("length"),
        "seed": described.get("seed"),
        "aggregate": "mean over the sequences of each one's figure; std: sample std of "
                     "those over the sequences",
        "runs": [{"sequence": s.get("sequence"), "jobs": s.get("jobs"),
                  "bounded_slowdown": (s.get("bounded_slowdown") or {}).get("mean"),
                  "utilisation": s.get("utilisation"),
                  "wait_max": (s.get("wait_seconds") or {}).get("max"),
                  "decision_p50": (s.get("decision_seconds") or {}).get("p50")}
                 for s in summaries],
    }
    return merged


def run_cell(cell: CellSpec, trace_data: bytes | None = None) -> CellResult:
    """Replay one cell (`hpcdispatch simulate` in a child process: the pipeline in-process,
    or an embedded server with `cell["grpc"]`, or `cell["target"]`); never raises."""
    started = time.perf_counter()
    result = CellResult(name=cell["name"], host=socket.gethostname(), worker=_worker_address(),
                        seconds=0.0, summary=None, files={}, error=None, traceback=None)
    try:
        with tempfile.TemporaryDirectory(prefix="hpcdispatch-cell-") as scratch:
            trace = None if cell["trace"] == BUNDLED and trace_data is None else _trace_path(
                cell, trace_data, Path(scratch))
            if trace is not None and not trace.is_file():
                raise FileNotFoundError(f"{trace}: no such trace file on this worker")
            out = Path(scratch) / "runs"
            # The replay runs in a child process: a cell holds a CPU for minutes to hours, and
            # in the worker's own process it would starve the worker's event loop (missed
            # heartbeats get a worker restarted, and its other cells lost).
            done = subprocess.run(simulate_command(cell, trace, out), capture_output=True,
                                  text=True, check=False)
            if done.returncode != 0:
                tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
                raise RuntimeError(f"hpcdispatch simulate exited {done.returncode}: {tail}")
            run_dirs = sorted(d for d in out.iterdir() if d.is_dir())
            if len(run_dirs) != 1 and not cell.get("sequences"):
                raise RuntimeError(f"expected one run directory, found {len(run_dirs)}")
            summaries = []
            for run_dir in run_dirs:
                summary = json.loads((run_dir / "summary.json").read_text("utf-8"))
                # The trace as the client named it, not the worker's scratch copy.
                summary["trace"] = (str(bundled_trace()) if cell["trace"] == BUNDLED
                                    else cell["trace"])
                write_summary(run_dir / "summary.json", summary)
                summaries.append(json.loads((run_dir / "summary.json").read_text("utf-8")))
                # One run: its files at the cell's top; sequences: one directory each.
                prefix = "" if len(run_dirs) == 1 and not cell.get("sequences") else (
                    f"{run_dir.name}/")
                result["files"].update({
                    prefix + name: gzip.compress((run_dir / name).read_bytes())
                    for name in RUN_FILES if (run_dir / name).exists()})
            result["summary"] = (sequence_summary(summaries) if cell.get("sequences")
                                 else summaries[0])
    except Exception as exc:  # reported as the cell's error; the campaign goes on
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc()
    result["seconds"] = time.perf_counter() - started
    return result
