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
from typing import Any, TypedDict

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
    ]
    command += [part for flag, value in options if value not in (None, "")
                for part in (flag, str(value))]
    if cell["charge_decision_time"]:
        command.append("--charge-decision-time")
    return command


def run_cell(cell: CellSpec, trace_data: bytes | None = None) -> CellResult:
    """Replay one cell (`hpcdispatch simulate` in a child process, with its own embedded
    server unless `cell["target"]`); never raises."""
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
            (run_dir,) = [d for d in out.iterdir() if d.is_dir()]
            summary = json.loads((run_dir / "summary.json").read_text("utf-8"))
            # The trace as the client named it, not the worker's scratch copy.
            summary["trace"] = str(bundled_trace()) if cell["trace"] == BUNDLED else cell["trace"]
            write_summary(run_dir / "summary.json", summary)
            result["summary"] = json.loads((run_dir / "summary.json").read_text("utf-8"))
            result["files"] = {name: gzip.compress((run_dir / name).read_bytes())
                               for name in RUN_FILES if (run_dir / name).exists()}
    except Exception as exc:  # reported as the cell's error; the campaign goes on
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc()
    result["seconds"] = time.perf_counter() - started
    return result
