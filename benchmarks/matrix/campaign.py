"""Campaigns: a matrix of trace replays run in parallel on Dask, results gathered in one place.

A campaign is traces × systems × predictors × dispatchers (× search profiles, for the CP
dispatchers only). One cell is one replay. EASY is always part of the dispatchers (added if
not listed): a cell's reference is the EASY cell of the same trace, system and predictor, and
`campaign.md` gives each cell's ratio to it (mean bounded slowdown, mean decision time).
One replay per cell, rather than one cell per group of dispatchers, keeps the long CP replays
from serialising behind each other; `campaign.md` marks a ratio whose EASY run was on another
host.

    python -m benchmarks.matrix.campaign --traces bundled --dispatchers easy,pcp20 \\
        --predictors walltime,last-two --limit-jobs 1000 --workers 2 --out runs/campaign
    python -m benchmarks.matrix.campaign --config campaign.yaml --scheduler tcp://host:8786

Where cells run: by default a Dask `LocalCluster` of `--workers` processes (default: the number
of cores) with one thread each, so one cell per process at a time; with `--scheduler` the
workers of that Dask scheduler (start them with `dask worker tcp://host:8786 --nthreads 1` so a
worker runs one cell at a time). A cell runs `hpcdispatch simulate` in a child process of its
worker, so the worker stays responsive to the scheduler however long the replay takes. Workers
must be able to import `hpcdispatch`, the same version as here (e.g. the same venv, or
`pip install .` of this checkout); the worker-side code (`benchmarks/matrix/cells.py`) is sent by
value, so the repository itself need not be on the workers. By default a cell calls the
service's decision pipeline in its own process (`hpcdispatch simulate --in-process`: the gRPC
path's decisions without the transport's cost); with `--grpc` it drives an embedded service on
loopback, and with `--target host:port` all cells share that service (its decision times then
include their contention; start it with `workers` at least one more than the cells that run at a
time, see docs/configuration.md). Decision times are comparable between cells only on like
hosts with no more cells at a time than cores (CP-SAT's search uses one thread per decision).

No shared filesystem needed: a trace file this process can read is sent to the workers; a
path it cannot read (`/data/...` on the cluster only) is opened by the worker; `bundled` is
the KTH-SP2 slice inside hpcdispatch. System files (`--systems FILE.yaml`) are opened by
the worker. Every cell returns its summary and CSVs, written here under `--out DIR/<cell>/`
(`hpcdispatch report DIR` works on it), with `DIR/campaign.json` (every summary, ratios,
errors) and `DIR/campaign.md` (the table), rewritten as cells finish. A failed cell is
listed with its error (`DIR/<cell>/error.txt` has the traceback) and the exit code is 1.
`--resume` with the same `--out` runs only the cells its `campaign.json` does not record as
ok with the same settings: a campaign of whole-trace replays that was stopped, or that gets one
more dispatcher, does not redo hours of finished cells.

`--config FILE` reads the same options from YAML (keys as the long flags, lists or comma
strings); flags given on the command line win:

    traces: [bundled, sim_adapter/data/LLNL-Atlas-2006-2.1-cln.swf.xz]
    dispatchers: [easy, pcp20, hcp19]
    predictors: walltime,last-two
    limit_jobs: 5000
"""

from __future__ import annotations

import argparse
import gzip
import json
import operator
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from benchmarks.matrix import cells as campaign_cells
from benchmarks.matrix.cells import BUNDLED, CellResult, CellSpec, run_cell
from benchmarks.matrix.report import NO_SEARCH, REFERENCE, campaign_document, write_campaign
from hpcdispatch.sim_adapter.adapter import ALLOCATORS, DEFAULT, DISPATCHERS, PREDICTORS
from hpcdispatch.sim_adapter.replay import bundled_trace, safe_dirname, trace_name
from hpcdispatch.sim_adapter.workload import UNIT_MODES

if TYPE_CHECKING:
    from distributed import Client, Future

LIST_OPTIONS = ("traces", "systems", "dispatchers", "predictors", "profiles")
EVERY = "all"  # --dispatchers word: every registered dispatcher, plugins included
FROM_HEADER = "header"  # system word: derive the system from the trace header


class UsageError(ValueError):
    """A campaign that cannot be set up (exit code 2)."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.matrix.campaign", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", type=Path, help="YAML file with any of the options below")
    p.add_argument("--traces", default=BUNDLED,
                   help=f"comma list of SWF files; '{BUNDLED}' = the slice in hpcdispatch")
    p.add_argument("--systems", default=FROM_HEADER, help="comma list: presets, NODESxCORES, "
                   f"files on the workers, '{FROM_HEADER}' = from the trace (default)")
    p.add_argument("--dispatchers", default="easy,pcp20",
                   help=f"comma list of {sorted(DISPATCHERS)} (the registered ones: the "
                   f"built-ins and the installed plugins), or '{EVERY}' for every one; easy is "
                   "always added")
    p.add_argument("--predictors", default="walltime", help=f"comma list of {sorted(PREDICTORS)}")
    p.add_argument("--profiles", default="",
                   help="comma list of search profiles of the CP dispatchers (default: the "
                   "server's)")
    p.add_argument("--allocator", choices=sorted(ALLOCATORS), default=DEFAULT)
    p.add_argument("--unit-mode", choices=UNIT_MODES, default="node")
    p.add_argument("--proc-scale", type=float, default=1.0,
                   help="cores per trace processor, for a trace on a preset (see hpcdispatch "
                   "simulate --help)")
    p.add_argument("--accelerator-share", type=float, default=0.0,
                   help="share of the small jobs asking for the system's GPUs / MICs")
    p.add_argument("--limit-jobs", type=int, help="replay only the first N cleaned jobs")
    p.add_argument("--records", help="replay only job records FIRST:LAST (hpcdispatch simulate "
                   "--records)")
    p.add_argument("--sequences", type=int, help="RLScheduler's protocol: each cell replays N "
                   "sequences (hpcdispatch simulate --sequences); its summary is the mean ± std "
                   "over them")
    p.add_argument("--sequence-length", type=int, default=1024, help="jobs per sequence")
    p.add_argument("--seed", type=int, default=1, help="seed of the sequence draws")
    p.add_argument("--wall-clock-search", action="store_true",
                   help="CP search limits in wall-clock time (default: deterministic)")
    p.add_argument("--charge-decision-time", action="store_true",
                   help="let each decision's wall time pass in simulated time")
    p.add_argument("--timeout", type=float, default=120.0, help="deadline per call, seconds")
    p.add_argument("--workers", type=int, help="local cluster: worker processes (default: cores)")
    p.add_argument("--scheduler", help="Dask scheduler address (tcp://host:8786); default: a "
                   "local cluster")
    p.add_argument("--target", help="host:port of a running service (default: each cell "
                   "calls the service's decision pipeline in its own process)")
    p.add_argument("--grpc", action="store_true",
                   help="each cell drives an embedded gRPC service on loopback instead of "
                   "calling the pipeline in-process (the same decisions, several times the "
                   "CPU: docs/benchmarks/replay-speed.md §5.1)")
    p.add_argument("--out", type=Path, help="results directory (default: runs/campaign-DATE)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--resume", action="store_true", help="keep the cells that --out's "
                   "campaign.json records as ok with the same settings (their directories "
                   "stay as they are) and run only the others")
    return p


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Flags over `--config` YAML over the defaults."""
    return parse_with_config(build_parser(), argv, lists=LIST_OPTIONS)


def parse_with_config(
    parser: argparse.ArgumentParser,
    argv: Sequence[str],
    lists: Collection[str] | None = None,
    paths: Collection[str] = ("out",),
    renames: Mapping[str, str] | None = None,
) -> argparse.Namespace:
    """Parse `argv`; a `--config FILE.yaml` among them supplies defaults for the other options
    (keys as the long flags, or `renames` of them), which flags given on the command line win.
    YAML lists become comma strings (for the options in `lists`; None: all), and the options in
    `paths` become Paths."""
    first = parser.parse_args(argv)
    if first.config is not None:
        loaded = yaml.safe_load(first.config.read_text(encoding="utf-8")) or {}
        if not isinstance(loaded, dict):
            raise UsageError(f"{first.config}: expected a mapping of options")
        known = {a.dest for a in parser._actions} - {"help", "config"}
        values: dict[str, Any] = {}
        for key, value in loaded.items():
            dest = (renames or {}).get(str(key), str(key).replace("-", "_"))
            if dest not in known:
                raise UsageError(f"{first.config}: unknown option {key!r}; one of {sorted(known)}")
            if isinstance(value, list) and (lists is None or dest in lists):
                value = ",".join(str(v) for v in value)
            values[dest] = Path(value) if dest in paths else value
        parser.set_defaults(**values)
    return parser.parse_args(argv)


def _split(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def _check(names: list[str], allowed: Collection[str], kind: str) -> None:
    for name in names:
        if name not in allowed:
            raise UsageError(f"unknown {kind} {name!r}; one of {sorted(allowed)}")


def with_every(names: list[str], registered: Sequence[str]) -> list[str]:
    """`names` with the word EVERY replaced by every registered name (the built-ins in the
    contract's order, then the installed plugins)."""
    return [n for name in names for n in (registered if name == EVERY else (name,))]


def _trace_label(trace: str) -> str:
    return trace_name(bundled_trace() if trace == BUNDLED else Path(trace))


def _system_label(system: str | None) -> str:
    if system is None:
        return FROM_HEADER
    return Path(system).stem if Path(system).suffix in (".yaml", ".yml", ".json") else system


def matrix(args: argparse.Namespace) -> list[CellSpec]:
    """The cells, in table order: trace, system, predictor, dispatcher (EASY first), profile."""
    traces = _split(args.traces)
    systems = [None if s == FROM_HEADER else s for s in _split(args.systems)] or [None]
    predictors = _split(args.predictors)
    dispatchers = with_every(_split(args.dispatchers), DISPATCHERS[1:])
    dispatchers = [REFERENCE, *(d for d in dict.fromkeys(dispatchers) if d != REFERENCE)]
    profiles = _split(args.profiles) or [""]
    _check(dispatchers, DISPATCHERS, "dispatcher")
    _check(predictors, PREDICTORS, "predictor")
    if not traces or not predictors:
        raise UsageError("at least one trace and one predictor")
    if args.limit_jobs is not None and args.limit_jobs < 1:
        raise UsageError("--limit-jobs must be >= 1")
    records = getattr(args, "records", None) or None
    sequences = getattr(args, "sequences", None)
    if records is not None and sequences is not None:
        raise UsageError("--records and --sequences exclude each other")
    if sequences is not None and (sequences < 1 or args.sequence_length < 1):
        raise UsageError("--sequences and --sequence-length must be >= 1")
    wall_clock = bool(getattr(args, "wall_clock_search", False))
    try:
        proc_scale, accelerator_share = float(args.proc_scale), float(args.accelerator_share)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"--proc-scale and --accelerator-share take numbers: {exc}") from exc
    if not proc_scale > 0 or not 0 <= accelerator_share <= 1:
        raise UsageError("--proc-scale must be > 0 and --accelerator-share in [0, 1]")
    cells: list[CellSpec] = []
    for trace in traces:
        for system in systems:
            for predictor in predictors:
                for dispatcher in dispatchers:
                    for profile in [""] if dispatcher in NO_SEARCH else profiles:
                        parts = [_trace_label(trace), _system_label(system), predictor,
                                 dispatcher, *([profile] if profile else [])]
                        cell = CellSpec(
                            name=safe_dirname("__".join(parts)), trace=trace,
                            trace_file=Path(trace).name, system=system, dispatcher=dispatcher,
                            predictor=predictor, profile=profile, allocator=args.allocator,
                            unit_mode=args.unit_mode, proc_scale=proc_scale,
                            accelerator_share=accelerator_share,
                            limit_jobs=args.limit_jobs,
                            charge_decision_time=args.charge_decision_time,
                            timeout=args.timeout, target=args.target,
                        )
                        # Only when set: cells stay as before without them.
                        if records is not None:
                            cell["records"] = str(records)
                        if sequences is not None:
                            cell["sequences"] = int(sequences)
                            cell["sequence_length"] = int(args.sequence_length)
                            cell["seed"] = int(args.seed)
                        if wall_clock:
                            cell["wall_clock_search"] = True
                        if args.grpc:
                            cell["grpc"] = True
                        cells.append(cell)
    names = [c["name"] for c in cells]
    if len(set(names)) != len(names):
        raise UsageError("two cells would share a directory (traces or systems with the same "
                         f"name?): {sorted(n for n in names if names.count(n) > 1)[0]}")
    return cells


@contextmanager
def dask_client(scheduler: str | None, workers: int) -> Iterator[tuple[Client, str]]:
    """A client of `scheduler`, or of a local cluster of `workers` one-thread processes."""
    import dask
    from distributed import Client, LocalCluster

    if scheduler:
        with Client(scheduler, timeout="30s") as client:
            count = len(client.scheduler_info().get("workers", {}))
            yield client, f"Dask scheduler {scheduler} ({count} workers at start)"
        return
    # The scheduler's and workers' scratch space in a folder of the run's own, removed after
    # it (Dask's default, dask-scratch-space in the temp folder, stays behind).
    with (tempfile.TemporaryDirectory(prefix="hpcdispatch-dask-") as scratch,
          dask.config.set({"temporary-directory": scratch}),
          LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                       dashboard_address=None, local_directory=scratch) as cluster,
          Client(cluster) as client):
        yield client, f"a local Dask cluster of {workers} worker processes"


def ship_traces(client: Client, cells: Sequence[CellSpec]) -> dict[str, Future | None]:
    """Per trace, its content scattered to the cluster, or None: the worker opens it itself."""
    shipped: dict[str, Future | None] = {}
    for trace in dict.fromkeys(c["trace"] for c in cells):
        path = Path(trace)
        if trace != BUNDLED and path.is_file():
            shipped[trace] = client.scatter(path.read_bytes(), hash=False, broadcast=True)
        else:
            shipped[trace] = None
            if trace != BUNDLED:
                print(f"campaign: {trace} is not readable here; the workers will open it",
                      file=sys.stderr)
    return shipped


def write_cell(out: Path, result: CellResult) -> Path:
    """The cell's directory under `out`, as its worker wrote it (or error.txt)."""
    cell_dir = out / result["name"]
    if cell_dir.is_dir():
        shutil.rmtree(cell_dir)  # a previous campaign's run of this cell
    cell_dir.mkdir(parents=True)
    for name, data in result["files"].items():
        (cell_dir / name).parent.mkdir(parents=True, exist_ok=True)  # a sequence's directory
        (cell_dir / name).write_bytes(gzip.decompress(data))
    if result["error"]:
        (cell_dir / "error.txt").write_text(
            f"{result['error']}\n\n{result['traceback'] or ''}", encoding="utf-8")
    return cell_dir


def lost_cell(name: str, exc: BaseException) -> CellResult:
    """A cell whose task never returned (worker died, cancelled, unpicklable, ...)."""
    return CellResult(name=name, host="", worker="", seconds=0.0, summary=None, files={},
                      error=f"{type(exc).__name__}: {exc}", traceback=None)


def finished_cells(out: Path, cells: Sequence[CellSpec]) -> dict[str, CellResult]:
    """The cells of `cells` that `out/campaign.json` records as ok with the same spec and
    whose summary is still in `out`, as results (without their files, which stay there)."""
    document = out / "campaign.json"
    if not document.is_file():
        return {}
    specs = {cell["name"]: json.loads(json.dumps(dict(cell))) for cell in cells}
    kept: dict[str, CellResult] = {}
    for entry in json.loads(document.read_text(encoding="utf-8"))["cells"]:
        name = entry["cell"]
        if (entry["status"] == "ok" and specs.get(name) == entry["spec"]
                and (out / name / "summary.json").is_file()):
            kept[name] = CellResult(name=name, host=entry["host"] or "",
                                    worker=entry["worker"] or "",
                                    seconds=entry["cell_seconds"] or 0.0,
                                    summary=entry["summary"], files={}, error=None,
                                    traceback=None)
    return kept


def run_campaign(args: argparse.Namespace, command: str) -> int:
    """Run every cell, gathering as they finish; 0 if all ran, 1 if any failed."""
    cells = matrix(args)
    out: Path = args.out or Path(time.strftime("runs/campaign-%Y%m%d-%H%M%S"))
    done = finished_cells(out, cells) if args.resume else {}
    results = run_cells(cells, out, command, workers=args.workers, scheduler=args.scheduler,
                        target=args.target, progress=not args.no_progress, done=done)
    print((out / "campaign.md").read_text(encoding="utf-8"))
    failed = [name for name, r in results.items() if r["error"]]
    return 1 if failed or len(results) < len(cells) else 0


def run_cells(cells: Sequence[CellSpec], out: Path, command: str, *, workers: int | None,
              scheduler: str | None, target: str | None = None,
              progress: bool = True,
              done: Mapping[str, CellResult] | None = None) -> dict[str, CellResult]:
    """Run `cells` on Dask, writing each under `out` and `out/campaign.{json,md}` as they
    finish; returns every cell's result by name (a cell without one did not return). The
    cells of `done` (results of an earlier run, already under `out`) are not run again."""
    import cloudpickle  # type: ignore[import-untyped]
    from distributed import as_completed
    from tqdm import tqdm

    workers = workers or _cores()
    if workers < 1:
        raise UsageError("--workers must be >= 1")
    cloudpickle.register_pickle_by_value(campaign_cells)  # workers need hpcdispatch only
    started = time.perf_counter()
    results: dict[str, CellResult] = dict(done or {})
    todo = [cell for cell in cells if cell["name"] not in results]
    meta: dict[str, Any] = {
        "command": command, "started": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "scheduler": scheduler, "target": target, "out": str(out),
        "reference": f"{REFERENCE} under the same trace, system and predictor",
    }
    with dask_client(scheduler, workers) as (client, cluster):
        meta["cluster"] = cluster
        kept = f" ({len(results)} kept from the last run)" if results else ""
        print(f"campaign: {len(todo)} cells{kept} on {cluster} -> {out}/", file=sys.stderr)
        if results:
            meta["kept"] = sorted(results)
        traces = ship_traces(client, todo)
        # The scheduler unpickles task graphs by reference, so the function goes as data
        # (pickled by value) and the task is operator.call, which every Python 3.11 has.
        cell_function = client.scatter(run_cell, hash=False, broadcast=True)
        # The CP cells are the long ones: they start first and the EASY cells fill in.
        futures = {
            client.submit(operator.call, cell_function, cell, traces[cell["trace"]],
                          key=f"cell-{cell['name']}", pure=False,
                          priority=0 if cell["dispatcher"] in NO_SEARCH else 1): cell["name"]
            for cell in todo
        }
        bar = tqdm(as_completed(futures), total=len(futures), desc="cells", unit="cell",
                   file=sys.stderr, disable=not progress)
        try:
            for future in bar:
                name = futures[future]
                try:
                    result: CellResult = future.result()
                except Exception as exc:
                    result = lost_cell(name, exc)
                results[name] = result
                cell_dir = write_cell(out, result)
                state = f"FAILED: {result['error']}" if result["error"] else (
                    f"{result['summary']['jobs'] if result['summary'] else '?'} jobs")
                bar.write(f"{name}: {state} ({result['seconds']:.1f} s, "
                          f"{result['host'] or '?'}) -> {cell_dir}", file=sys.stderr)
                meta["wall_seconds"] = time.perf_counter() - started
                write_campaign(out, campaign_document(meta, cells, results))
        finally:
            bar.close()
            meta["wall_seconds"] = time.perf_counter() - started
            write_campaign(out, campaign_document(meta, cells, results))
    failed = [name for name, r in results.items() if r["error"]]
    print(f"campaign: {len(results) - len(failed)} of {len(cells)} cells ok"
          + (f", {len(failed)} failed" if failed else "")
          + f" in {meta['wall_seconds']:.1f} s; {out}/campaign.md", file=sys.stderr)
    return results


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = shlex.join(["python", "-m", "benchmarks.matrix.campaign", *argv])
    try:
        return run_campaign(parse_args(argv), command)
    except (UsageError, OSError, yaml.YAMLError) as exc:
        print(f"campaign: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
