"""`hpcdispatch simulate` and `hpcdispatch report` (wired in by `register`)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import grpc

from hpcdispatch.sim_adapter.adapter import (
    ALLOCATORS,
    DEFAULT,
    DISPATCHERS,
    PREDICTORS,
    DispatchSettings,
    service_target,
)
from hpcdispatch.sim_adapter.workload import UNIT_MODES

DEFAULT_DISPATCHERS = (DEFAULT, "easy")


def register(subparsers: Any) -> None:
    """Add the `simulate` and `report` subcommands to an argparse subparsers object."""
    _add_simulate(subparsers)
    _add_report(subparsers)


def _add_simulate(sub: Any) -> None:
    p = sub.add_parser(
        "simulate",
        help="replay an SWF trace through the dispatching service and compare dispatchers",
        description="Replay a Standard Workload Format trace through the service (an embedded "
        "one on loopback unless --target is given), once per --dispatcher, and print the "
        "comparison. Without arguments: a bundled slice of the KTH-SP2 trace (3,000 jobs), "
        "with the server's default dispatcher and with EASY.",
    )
    p.add_argument("--trace", type=Path, help="SWF file (plain, .gz or .xz); default: bundled")
    p.add_argument("--system", help="preset (kit-forhlr2, eurora), YAML / JSON file, or "
                   "NODESxCORES; default: derived from the trace header")
    p.add_argument("--unit-mode", choices=UNIT_MODES, default="node",
                   help="how a job's processors become units (default: node)")
    p.add_argument("--proc-scale", type=float, default=1.0, metavar="X",
                   help="cores per trace processor, to carry a trace's load to another system "
                   "(LLNL-Atlas on kit-forhlr2: 2.5; lublin_256 on eurora: 4; default: 1)")
    p.add_argument("--accelerator-share", type=float, default=0.0, metavar="F",
                   help="share of the jobs of at most 8 units that ask for 1-2 of the "
                   "system's GPUs / MICs per unit, picked by a hash of the job id (default: 0)")
    p.add_argument("--dispatcher", action="append", choices=sorted(DISPATCHERS),
                   help="repeatable; 'default' = the server's default "
                   f"(default: {' and '.join(DEFAULT_DISPATCHERS)})")
    p.add_argument("--predictor", choices=sorted(PREDICTORS), default=DEFAULT,
                   help="duration predictor (default: the server's default)")
    p.add_argument("--allocator", choices=sorted(ALLOCATORS), default=DEFAULT,
                   help="allocation of FCFS / EASY / HCP'19 (default: the server's, best fit)")
    p.add_argument("--profile", default="", help="search profile of the CP dispatchers")
    p.add_argument("--target", help="host:port of a running service (default: embedded)")
    p.add_argument("--out", type=Path, help="directory for the runs (default: "
                   "./replay-YYYYmmdd-HHMMSS)")
    p.add_argument("--charge-decision-time", action="store_true",
                   help="let each decision's wall time pass in simulated time")
    p.add_argument("--limit-jobs", type=int, help="replay only the first N cleaned jobs")
    p.add_argument("--timeout", type=float, default=120.0, help="deadline per call, seconds")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run_simulate)


def _add_report(sub: Any) -> None:
    p = sub.add_parser(
        "report", help="put replay runs side by side: a table and PNG plots",
        description="RUN is a run directory (with summary.json) or a directory of runs.",
    )
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN")
    p.add_argument("--out", type=Path, help="where to write the PNGs (default: the first "
                   "RUN's directory of runs, subdirectory 'report')")
    p.add_argument("--no-plots", action="store_true", help="print the table only")
    p.set_defaults(func=run_report)


def run_simulate(args: argparse.Namespace) -> int:
    from hpcdispatch.sim_adapter.replay import RunSpec, bundled_trace, replay, safe_dirname
    from hpcdispatch.sim_adapter.report import comparison_table
    from hpcdispatch.sim_adapter.simulator import SimulationError
    from hpcdispatch.sim_adapter.swf import SwfFormatError

    trace = args.trace or bundled_trace()
    dispatchers = args.dispatcher or list(DEFAULT_DISPATCHERS)
    out = args.out or Path(time.strftime("replay-%Y%m%d-%H%M%S"))
    if args.limit_jobs is not None and args.limit_jobs < 1:
        print("--limit-jobs must be >= 1", file=sys.stderr)
        return 2
    summaries: list[dict[str, Any]] = []
    try:
        with service_target(args.target) as target:
            for dispatcher in dispatchers:
                spec = RunSpec(
                    trace=trace,
                    settings=DispatchSettings(dispatcher=dispatcher, predictor=args.predictor,
                                              allocator=args.allocator, profile=args.profile),
                    system=args.system, unit_mode=args.unit_mode, proc_scale=args.proc_scale,
                    accelerator_share=args.accelerator_share, limit_jobs=args.limit_jobs,
                    charge_decision_time=args.charge_decision_time,
                    progress=not args.no_progress, timeout=args.timeout,
                )
                run_dir = out / f"{len(summaries) + 1:02d}-{safe_dirname(dispatcher)}"
                summary = replay(spec, target, run_dir)
                summaries.append(summary)
                print(f"{summary['label']}: {summary['jobs']} jobs, {summary['decisions']} "
                      f"decisions, {summary['replay_seconds']:.1f} s -> {run_dir}",
                      file=sys.stderr)
    except (SwfFormatError, ValueError, FileNotFoundError) as exc:
        print(f"hpcdispatch simulate: {exc}", file=sys.stderr)
        return 2
    except (SimulationError, grpc.RpcError) as exc:
        print(f"hpcdispatch simulate: {exc}", file=sys.stderr)
        return 1
    first = summaries[0]
    print(f"trace {trace.name}: system {first['system']['name']} "
          f"({first['system']['nodes']} nodes, {first['system']['cores']} cores), "
          f"{first['cleaning']['kept']} jobs kept of {first['cleaning']['records']} records, "
          f"dropped {first['cleaning']['dropped_total']} in cleaning, "
          f"{sum(first['dropped_in_replay'].values())} in replay")
    print(comparison_table(summaries))
    print(f"\nruns in {out}/; plots: hpcdispatch report {out}")
    return 0


def run_report(args: argparse.Namespace) -> int:
    from hpcdispatch.sim_adapter.report import comparison_table, find_runs, write_plots

    try:
        runs = find_runs(args.runs)
    except FileNotFoundError as exc:
        print(f"hpcdispatch report: {exc}", file=sys.stderr)
        return 2
    print(comparison_table([r.summary for r in runs]))
    if not args.no_plots:
        first = args.runs[0]
        out = args.out or ((first if not (first / "summary.json").exists() else first.parent)
                           / "report")
        for path in write_plots(runs, out):
            print(f"wrote {path}")
    return 0
