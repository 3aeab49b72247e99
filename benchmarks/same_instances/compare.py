"""Every dispatcher on the same captured instances (the 2020 paper's Figures 6 and 7).

1. Capture: replay a loaded slice of each shared trace with EASY through a real service on
   loopback and keep every N-th request with at least 2 queued jobs
   (benchmarks.same_instances.capture),
   plus the Eurora-like sets: Lublin-256 replayed on the `eurora` preset with jobs asking for
   GPUs or MICs (benchmarks.same_instances.sources), and synthetic Eurora snapshots.
2. Send every instance to every dispatcher (FCFS, EASY, HCP'19, PCP'19, PCP'20; the first
   profile for all, further profiles on the first few instances of each set).
3. Report per-instance ratios (variables and decision time PCP'20 / PCP'19, each CP dispatcher /
   EASY, decision quality / best) as Markdown (stdout and results/same_instances.md), the raw
   rows (results/same_instances.csv) and plots (results/same_instances_*.png), and check the
   target: the default CP dispatcher within 10× of EASY (median per-instance ratio).

    python -m benchmarks.same_instances [--instances 60] [--profiles qos,papers]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from benchmarks.same_instances.capture import read_instances
from benchmarks.same_instances.report import markdown, plot
from benchmarks.same_instances.run import ALL_DISPATCHERS, run_instances, write_rows
from benchmarks.same_instances.sources import (
    DEFAULT_SLICES,
    TRACES,
    CaptureOptions,
    InstanceSet,
    TraceSlice,
    capture_replay,
    synthetic_set,
)
from hpcdispatch.catalog import DISPATCHER_BY_KIND
from hpcdispatch.client import DispatcherClient
from hpcdispatch.server.logging_config import configure_logging
from hpcdispatch.server.rpc.embedded import embedded_server
from hpcdispatch.sim_adapter.swf import read_header
from hpcdispatch.sim_adapter.workload import resolve_system

RESULTS = Path(__file__).resolve().parents[1] / "results"
SYNTHETIC = "eurora-synthetic"
DEFAULT_SETS = (*DEFAULT_SLICES, SYNTHETIC)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _slice(name: str, overrides: dict[str, tuple[int, int]], traces: Path) -> TraceSlice:
    base = DEFAULT_SLICES[name]
    skip, jobs = overrides.get(name, (base.skip, base.jobs))
    return dataclasses.replace(base, trace=traces / base.trace.name, skip=skip, jobs=jobs)


def _overrides(specs: Sequence[str]) -> dict[str, tuple[int, int]]:
    out = {}
    for spec in specs:
        name, _, value = spec.partition("=")
        skip, _, jobs = value.partition(":")
        if name not in DEFAULT_SLICES or not skip.isdigit() or not jobs.isdigit():
            raise SystemExit(f"--slice {spec!r}: expected NAME=SKIP:JOBS, NAME one of "
                             f"{sorted(DEFAULT_SLICES)}")
        out[name] = (int(skip), int(jobs))
    return out


def collect_sets(
    names: Sequence[str], target: str, instances_dir: Path, options: CaptureOptions,
    synthetic: int, traces: Path = TRACES, overrides: dict[str, tuple[int, int]] | None = None,
    reuse: bool = False,
) -> list[InstanceSet]:
    """Capture (or, with `reuse`, read back from `instances_dir`) the named instance sets."""
    sets = []
    for name in names:
        began = time.perf_counter()
        if name == SYNTHETIC:
            sets.append(synthetic_set(SYNTHETIC, "eurora", synthetic, options.predictor))
            continue
        path = instances_dir / f"{name}.pb"
        source = _slice(name, overrides or {}, traces)
        if reuse and path.exists():
            system = resolve_system(source.system, read_header(source.trace), name=name)
            label = source.system or f"{system.node_count}x{system.groups[0].capacity['core']}"
            sets.append(InstanceSet(name, label, system.node_count,
                                    tuple(read_instances(path))))
        else:
            sets.append(capture_replay(source, target, path, options))
        _log(f"{name}: {len(sets[-1].requests)} instances "
             f"({time.perf_counter() - began:.0f} s)")
    return sets


def _notes(
    sets: Sequence[InstanceSet], options: CaptureOptions, args: argparse.Namespace
) -> list[str]:
    """One line per set: where its instances come from."""
    overrides = _overrides(args.slice)
    out = []
    for instance_set in sets:
        if instance_set.name == SYNTHETIC:
            out.append(f"{SYNTHETIC}: {len(instance_set.requests)} snapshots of "
                       "hpcdispatch.synthetic on the eurora preset (seeds 0…, queue 100 / 50, "
                       "busy 0.5 / 0.7 / 0.9; 30 % of units ask for 1–2 GPUs or MICs)")
            continue
        source = _slice(instance_set.name, overrides, args.traces)
        every = options.every if source.every is None or options.force_every else source.every
        extra = (", each processor = 4 cores, some jobs ask for GPUs / MICs"
                 if source.accelerators else "")
        out.append(
            f"{instance_set.name}: {source.trace.name}, cleaned jobs {source.skip:,}–"
            f"{source.skip + source.jobs:,} replayed with {options.dispatcher} + "
            f"{options.predictor} on {instance_set.system}{extra}; every {every}. decision "
            f"with ≥ {options.min_queued} queued jobs, up to {options.limit}")
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.same_instances",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default=",".join(DEFAULT_SETS))
    parser.add_argument("--instances", type=int, default=60, help="per captured set")
    parser.add_argument("--every", type=int, default=None,
                        help="keep every N-th eligible request (default: per set, 1-10)")
    parser.add_argument("--min-queued", type=int, default=2)
    parser.add_argument("--synthetic", type=int, default=12, help=f"{SYNTHETIC} snapshots")
    parser.add_argument("--slice", action="append", default=[], metavar="NAME=SKIP:JOBS",
                        help="trace slice of a captured set (repeatable)")
    parser.add_argument("--dispatchers", default=",".join(ALL_DISPATCHERS))
    parser.add_argument("--profiles", default="qos",  # `fast` until issue #49: its search
                        help="search profiles; the first on every instance, others on a few")
    parser.add_argument("--secondary-instances", type=int, default=5)
    parser.add_argument("--predictor", default="oracle", choices=("oracle", "walltime"))
    parser.add_argument("--capture-dispatcher", default="easy")
    parser.add_argument("--traces", type=Path, default=TRACES)
    parser.add_argument("--instances-dir", type=Path, default=None,
                        help="keep the captured instances here (default: a temporary dir)")
    parser.add_argument("--reuse", action="store_true",
                        help="read instances from --instances-dir instead of capturing")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--timeout", type=float, default=120.0, help="deadline per call, s")
    args = parser.parse_args(argv)
    command = "python -m benchmarks.same_instances" + (
        " " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    names = args.sets.split(",")
    unknown = [n for n in names if n not in DEFAULT_SETS]
    if unknown:
        raise SystemExit(f"unknown sets {unknown}; one of {list(DEFAULT_SETS)}")
    options = CaptureOptions(limit=args.instances, every=args.every or 5,
                             force_every=args.every is not None,
                             min_queued=args.min_queued, dispatcher=args.capture_dispatcher,
                             predictor=args.predictor, timeout=args.timeout)
    args.out.mkdir(parents=True, exist_ok=True)
    configure_logging("console", "warning")  # the service's log lines stay off stdout
    with tempfile.TemporaryDirectory() as scratch, \
            embedded_server(log_level="warning") as target:
        instances_dir = args.instances_dir or Path(scratch)
        instances_dir.mkdir(parents=True, exist_ok=True)
        with DispatcherClient(target, timeout=15) as client:
            default = DISPATCHER_BY_KIND[client.describe().default_dispatcher]
        sets = collect_sets(names, target, instances_dir, options, args.synthetic,
                            args.traces, _overrides(args.slice), args.reuse)
        rows = run_instances(sets, target, args.dispatchers.split(","),
                             args.profiles.split(","), args.secondary_instances, args.timeout,
                             progress=_log)
    write_rows(rows, args.out / "same_instances.csv")
    text = markdown(rows, default, command, _notes(sets, options, args))
    (args.out / "same_instances.md").write_text(text, encoding="utf-8")
    for path in plot(rows, args.out):
        _log(f"wrote {path}")
    print(text, end="")


if __name__ == "__main__":
    main()
