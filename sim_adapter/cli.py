"""`hpcdispatch simulate` and `hpcdispatch report` (wired in by `register`)."""

from __future__ import annotations

import argparse
import csv
import re
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hpcdispatch.systems import preset_names

from .adapter import (
    ALLOCATORS,
    DEFAULT,
    DISPATCHERS,
    PREDICTORS,
    DispatchSettings,
    search_override,
    service_target,
)
from .workload import MAX_NODES, UNIT_MODES

if TYPE_CHECKING:
    from .replay import RunSpec


# The CLI is installed in the virtual environment: hints name the command as it runs here.
def cli_command() -> str:
    """`hpcdispatch` when it is on PATH as this one, else the path of this one (.venv/bin/...)."""
    import os

    here = os.path.join(os.path.dirname(sys.executable), "hpcdispatch")
    found = shutil.which("hpcdispatch")
    if found is not None and os.path.realpath(found) == os.path.realpath(here):
        return "hpcdispatch"
    if os.path.exists(here):
        relative = os.path.relpath(here)
        return relative if not relative.startswith("..") else here
    return f"{shlex.quote(sys.executable)} -m hpcdispatch"


def rpc_errors() -> tuple[type[BaseException], ...]:
    """grpc's call failure, once grpc is loaded (a gRPC path loaded it); none before: an
    in-process replay never loads grpc, so nothing it raises is one."""
    loaded = sys.modules.get("grpc")
    return () if loaded is None else (loaded.RpcError,)


def rpc_error_text(error: BaseException) -> str:
    """"CODE: details" of a failed call, not the repr of grpc's error object."""
    code_of, details_of = getattr(error, "code", None), getattr(error, "details", None)
    code = code_of() if callable(code_of) else None
    details = details_of() if callable(details_of) else None
    if code is None:
        return str(error)
    return f"{code.name}: {details or '(no details)'}"

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
    _add_system_options(p)
    _add_dispatch_options(p)
    _add_record_options(p)
    _add_run_options(p)
    p.set_defaults(func=run_simulate)


def _add_system_options(p: argparse.ArgumentParser) -> None:
    """simulate's trace and the system it runs on."""
    p.add_argument("--trace", help="SWF file (plain, .gz or .xz), or a trace shipped with "
                   "hpcdispatch: kth-sp2-slice (the default: 3,000 jobs of KTH-SP2), kth-sp2, "
                   "llnl-atlas, lublin-256 (sim_adapter/data/README.md)")
    p.add_argument("--system", help=f"preset ({', '.join(preset_names())}), YAML / JSON "
                   "file (docs/replays.md, System files: partitions, features, maintenance "
                   "windows), or NODESxCORES; default: derived from the trace header")
    p.add_argument("--max-nodes", type=int, default=MAX_NODES, metavar="N",
                   help="largest system a replay builds, from the trace header or --system "
                   f"(default: {MAX_NODES:,}, the service's default max_nodes)")
    p.add_argument("--unit-mode", choices=UNIT_MODES, default="node",
                   help="how a job's processors become units (default: node)")
    p.add_argument("--proc-scale", type=float, default=1.0, metavar="X",
                   help="cores per trace processor, to carry a trace's load to another system "
                   "(LLNL-Atlas on kit-forhlr2: 2.5; lublin_256 on eurora: 4; default: 1)")
    p.add_argument("--accelerator-share", type=float, default=0.0, metavar="F",
                   help="share of the jobs of at most 8 units that ask for 1-2 of the "
                   "system's GPUs / MICs per unit, picked by a hash of the job id (default: 0)")


def _add_dispatch_options(p: argparse.ArgumentParser) -> None:
    """simulate's dispatchers, predictor and service."""
    p.add_argument("--dispatcher", action="append", choices=sorted(DISPATCHERS),
                   help="repeatable; 'default' = the server's default "
                   f"(default: {' and '.join(DEFAULT_DISPATCHERS)})")
    p.add_argument("--predictor", choices=sorted(PREDICTORS), default=DEFAULT,
                   help="duration predictor (default: the server's default)")
    p.add_argument("--allocator", choices=sorted(ALLOCATORS), default=DEFAULT,
                   help="allocation of FCFS / EASY / HCP'19 (default: the server's, best fit)")
    p.add_argument("--profile", default="", help="search profile of the CP dispatchers (hcp19, "
                   "pcp19, pcp20), one of the server's (hpcdispatch serve --help); default: "
                   "the server's default profile")
    p.add_argument("--search", action="append", default=[], metavar="KEY=VALUE",
                   type=_search_override,
                   help="repeatable: a SearchParameters field over the profile's, for every "
                   "request of the CP dispatchers (e.g. promise_after_s=86400, a rung of the "
                   "promise book's ladder; docs/configuration.md, Search profiles)")
    p.add_argument("--target", help="host:port of a running service (default: embedded)")
    p.add_argument("--out", type=Path, help="directory for the runs (default: "
                   "./replay-YYYYmmdd-HHMMSS); one that holds runs already is refused, "
                   "unless --overwrite")
    p.add_argument("--overwrite", action="store_true",
                   help="remove the runs --out holds from an earlier replay before replaying")
    p.add_argument("--charge-decision-time", action="store_true",
                   help="let each decision's wall time pass in simulated time")


def _search_override(text: str) -> tuple[str, int | bool]:
    try:
        return search_override(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _add_record_options(p: argparse.ArgumentParser) -> None:
    """Which of the trace's jobs a replay takes, how many times."""
    p.add_argument("--limit-jobs", type=int, help="replay only the first N cleaned jobs")
    p.add_argument("--records", metavar="FIRST:LAST",
                   help="replay only job records FIRST .. LAST-1 (0-based over the trace's job "
                   "lines, as a Python slice; a window past the last record is refused)")
    # argparse takes "-5:10" for an option ("expected one argument"): counted as a negative
    # number, it reaches --records, whose check names what is wrong with it.
    p._negative_number_matcher = re.compile(r"^-\d+$|^-\d*\.\d+$|^-\d*:-?\d*$")
    p.add_argument("--sequences", type=int, metavar="N",
                   help="RLScheduler's protocol: replay N sequences of --sequence-length jobs, "
                   "start indices drawn as its evaluation script draws them (--seed), each on "
                   "an empty machine, and report mean ± std over them (predictor default: "
                   "walltime, RLScheduler's estimates)")
    p.add_argument("--sequence-length", type=int, default=1024, metavar="L",
                   help="jobs per sequence (default: 1024)")
    p.add_argument("--seed", type=int, default=1, metavar="S",
                   help="seed of the sequence draws (default: 1, as RLScheduler's tables)")
    p.add_argument("--repeats", type=int, default=1, metavar="R",
                   help="replay each sequence R times (default: 1)")


def _add_run_options(p: argparse.ArgumentParser) -> None:
    """How simulate's replays talk to the service."""
    p.add_argument("--wall-clock-search", action="store_true",
                   help="CP search limits in wall-clock time, as the service does by default; "
                   "without it a replay asks for deterministic limits, so its decisions do not "
                   "depend on the machine's load")
    p.add_argument("--timeout", type=float, default=120.0, help="deadline per call, seconds")
    p.add_argument("--full-snapshots", action="store_true",
                   help="send every snapshot whole (Dispatch) instead of deltas to a session")
    p.add_argument("--unary-sessions", action="store_true",
                   help="send the session's deltas as unary calls (UpdateSession) instead of "
                   "on a session stream (StreamSession, the default)")
    p.add_argument("--in-process", action="store_true",
                   help="call the service's decision pipeline in this process instead of a "
                   "gRPC service: the same decisions (each checked as on the gRPC path) at "
                   "the cost of the simulator and the dispatcher alone; for campaigns and "
                   "benchmarks (excludes --target and --full-snapshots)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")



def _add_report(sub: Any) -> None:
    p = sub.add_parser(
        "report", help="put replay runs side by side: a table and PNG plots",
        description="RUN is a run directory (with summary.json) or a directory of runs.",
    )
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN")
    p.add_argument("--out", type=Path, help="where to write the PNGs (default: the first "
                   "RUN's directory of runs, subdirectory 'report')")
    p.add_argument("--no-plots", action="store_true", help="print the table only")
    p.add_argument("--mixed-traces", action="store_true",
                   help="put runs of different workloads (trace, records, system) in one "
                   "report, each tagged with its workload; without it they are refused")
    p.set_defaults(func=run_report)


def run_simulate(args: argparse.Namespace) -> int:
    from .replay import resolve_trace
    from .simulator import ReplayInterrupted, SimulationError
    from .swf import SwfFormatError

    try:
        trace = resolve_trace(args.trace)
    except ValueError as exc:
        print(f"hpcdispatch simulate: {exc}", file=sys.stderr)
        return 2
    dispatchers = args.dispatcher or list(DEFAULT_DISPATCHERS)
    out = args.out or Path(time.strftime("replay-%Y%m%d-%H%M%S"))
    wrong = _wrong_options(args)
    if wrong is not None:
        print(wrong, file=sys.stderr)
        return 2
    refusal = _out_refusal(out, args.overwrite)
    if refusal is not None:
        print(f"hpcdispatch simulate: {refusal}", file=sys.stderr)
        return 2
    predictor = _predictor_of(args)
    summaries: list[dict[str, Any]] = []
    unmeasured: list[str] = []  # runs whose every decision was the fallback's
    try:
        if not _replay_runs(args, trace, dispatchers, predictor, out, summaries, unmeasured):
            return 2
    except (SwfFormatError, ValueError, FileNotFoundError) as exc:
        print(f"hpcdispatch simulate: {exc}", file=sys.stderr)
        return 2
    except ReplayInterrupted:
        return 130  # as a shell reports a command ended by SIGINT
    except rpc_errors() as exc:
        print(f"hpcdispatch simulate: {rpc_error_text(exc)}", file=sys.stderr)
        return 1
    except SimulationError as exc:
        print(f"hpcdispatch simulate: {exc}", file=sys.stderr)
        return 1
    _print_results(args, trace.name, summaries, out)
    if unmeasured:
        print(f"hpcdispatch simulate: every decision of {', '.join(unmeasured)} was the "
              "fallback's (EASY): those rows measure EASY, not the dispatcher asked for",
              file=sys.stderr)
        return 1
    return 0


def _predictor_of(args: argparse.Namespace) -> str:
    """The predictor the runs ask for."""
    if args.sequences is not None and args.predictor == DEFAULT:
        return "walltime"  # RLScheduler's heuristics order and reserve by requested time
    return args.predictor


def _replay_runs(
    args: argparse.Namespace, trace: Path, dispatchers: list[str], predictor: str, out: Path,
    summaries: list[dict[str, Any]], unmeasured: list[str],
) -> bool:
    """Every run (dispatcher x selection x repeat) on one service, in order: its summary
    appended to `summaries`, its label to `unmeasured` when every decision was the fallback's.
    False when the service cannot run the profile (said on stderr; nothing replayed); the
    errors of a replay are raised."""
    from .outputs import write_summary
    from .replay import replay, safe_dirname, system_of

    selections = _selections(args, trace)
    # The system the trace makes, before any service starts: a header that cannot make
    # one is the user's error, answered without starting (and stopping) a server.
    system_of(trace, args.system, args.max_nodes)
    if args.overwrite:
        _remove_earlier(out)
    with _stop_at_ctrl_c() as interrupted, _service(args.target, args.in_process) as target:
        problem = _check_profile(args.profile, dispatchers, target, args.timeout)
        if problem is not None:
            print(f"hpcdispatch simulate: {problem}", file=sys.stderr)
            return False
        for d, dispatcher in enumerate(dispatchers, start=1):
            for name, records, sequence in selections:
                for repeat in range(args.repeats):
                    spec = _run_spec(args, trace, dispatcher, predictor, records)
                    # One level below `out`, as `hpcdispatch report OUT` looks for runs.
                    parts = [f"{d:02d}", safe_dirname(dispatcher), name,
                             f"repeat-{repeat + 1}" if args.repeats > 1 else ""]
                    run_dir = out / "-".join(part for part in parts if part)
                    summary = _replay_or_clean_up(replay, spec, target, run_dir, interrupted)
                    if sequence is not None:
                        summary["sequence"] = {**sequence, "repeat": repeat + 1}
                        write_summary(run_dir / "summary.json", summary)
                    summaries.append(summary)
                    _print_run(summary, name, run_dir)
                    if summary.get("fallback_decisions"):
                        unmeasured.extend(_fallback_warning(summary, run_dir))
    return True


def _print_run(summary: dict[str, Any], name: str, run_dir: Path) -> None:
    """One line on stderr for a finished run."""
    print(f"{summary['label']}{' ' + name if name else ''}: "
          f"{summary['jobs']} jobs, {summary['decisions']} decisions, "
          f"{summary['replay_seconds']:.1f} s -> {run_dir}",
          file=sys.stderr)


def _fallback_warning(summary: dict[str, Any], run_dir: Path) -> list[str]:
    """Warn that some of a run's decisions were the fallback's, with the first reason
    (decisions.csv); [the run's label] when all of them were, else []."""
    reason = "(see fallback_reason in decisions.csv)"
    decisions_csv = run_dir / "decisions.csv"
    if decisions_csv.exists():
        with decisions_csv.open(newline="", encoding="utf-8") as rows:
            reason = next((row["fallback_reason"] for row in csv.DictReader(rows)
                           if row.get("fallback_reason")), reason)
    fallbacks, decisions = summary["fallback_decisions"], summary["decisions"]
    print(f"hpcdispatch simulate: warning: {summary['label']}: {fallbacks:,} of "
          f"{decisions:,} decisions were answered by the fallback (EASY); the first because: "
          f"{reason}", file=sys.stderr)
    return [summary["label"]] if fallbacks == decisions else []


def _wrong_options(args: argparse.Namespace) -> str | None:
    """What is wrong with simulate's options taken together, or None."""
    if args.limit_jobs is not None and args.limit_jobs < 1:
        return "--limit-jobs must be >= 1"
    if args.sequences is not None and args.records is not None:
        return "--sequences and --records exclude each other"
    if args.repeats < 1:
        return "--repeats must be >= 1"
    if args.in_process and (args.target or args.full_snapshots or args.unary_sessions):
        return "--in-process excludes --target, --full-snapshots and --unary-sessions"
    return None


def _run_spec(args: argparse.Namespace, trace: Path, dispatcher: str, predictor: str,
              records: Collection[int] | None) -> RunSpec:
    """One replay of simulate's options: `dispatcher` on `records` of `trace`."""
    from .replay import RunSpec

    return RunSpec(
        trace=trace,
        settings=DispatchSettings(
            dispatcher=dispatcher, predictor=predictor,
            allocator=args.allocator, profile=args.profile,
            deterministic=not args.wall_clock_search, search=tuple(args.search),
        ),
        system=args.system, unit_mode=args.unit_mode,
        proc_scale=args.proc_scale,
        accelerator_share=args.accelerator_share,
        limit_jobs=args.limit_jobs,
        charge_decision_time=args.charge_decision_time,
        progress=not args.no_progress, timeout=args.timeout,
        full_snapshots=args.full_snapshots,
        unary_sessions=args.unary_sessions,
        records=records, max_nodes=args.max_nodes,
        own_service=args.target is None,  # the embedded service
    )


def _print_results(args: argparse.Namespace, trace_name: str, summaries: list[dict[str, Any]],
                   out: Path) -> None:
    """The trace's line, the runs' table (aggregated over sequences or repeats), where they are."""
    from .report_tables import comparison_table, site_rules_table  # not the plots' modules

    first = summaries[0]
    print(f"trace {trace_name}: system {first['system']['name']} "
          f"({first['system']['nodes']} nodes, {first['system']['cores']} cores), "
          f"{first['cleaning']['kept']} jobs kept of {first['cleaning']['records']} records, "
          f"dropped {first['cleaning']['dropped_total']} in cleaning, "
          f"{sum(first['dropped_in_replay'].values())} in replay")
    if args.sequences is not None or args.repeats > 1:
        from .sequences import aggregate_table

        print(aggregate_table(summaries))
    else:
        print(comparison_table(summaries))
    if site := site_rules_table(summaries):
        print(f"\nthe site's rules (first submission to last end):\n{site}")
    print(f"\nruns in {out}/; plots: {cli_command()} report {shlex.quote(str(out))}")


@contextmanager
def _service(target: str | None, in_process: bool) -> Iterator[Any]:
    """The replays' target: the service in this process, or a gRPC service's address (the
    embedded one when `target` is None)."""
    if in_process:
        from .in_process_backend import LocalService

        yield LocalService()
        return
    with service_target(target) as address:
        yield address


def _replay_or_clean_up(replay: Any, spec: Any, target: Any, run_dir: Path,
                        interrupted: Callable[[], bool] | None = None) -> dict[str, Any]:
    """replay(spec, target, run_dir); a replay that fails leaves no half-written run folder
    (a folder without summary.json, which `report` could not read); one interrupted keeps
    what it did, in a folder that says it is incomplete (incomplete.json)."""
    from .simulator import ReplayInterrupted

    existed = run_dir.exists()
    try:
        return dict(replay(spec, target, run_dir, interrupted=interrupted))
    except ReplayInterrupted as stopped:
        print(f"hpcdispatch simulate: {stopped}; {run_dir} is incomplete: its incomplete.json "
              "says so and `report` leaves it out", file=sys.stderr)
        raise
    except BaseException:
        if not existed and run_dir.is_dir() and not (run_dir / "summary.json").exists():
            shutil.rmtree(run_dir, ignore_errors=True)
            print(f"hpcdispatch simulate: removed the incomplete run folder {run_dir}",
                  file=sys.stderr)
            parent = run_dir.parent
            if parent.is_dir() and not any(parent.iterdir()):
                parent.rmdir()
        raise


# What a folder of runs holds of an earlier replay (a run's folder has one of these).
RUN_FILES = ("summary.json", "incomplete.json", "jobs.csv", "decisions.csv")


def _earlier_runs(out: Path) -> list[Path]:
    """The run folders `out` holds from an earlier replay."""
    if not out.is_dir():
        return []
    return sorted(p for p in out.iterdir()
                  if p.is_dir() and any((p / name).exists() for name in RUN_FILES))


def _out_refusal(out: Path, overwrite: bool) -> str | None:
    """Why the runs cannot go to `out` (a file; a folder of earlier runs without
    --overwrite, which `report` would mix with these), or None."""
    if out.exists() and not out.is_dir():
        return (f"--out {out}: is a file, not a folder; give a folder for the runs (one that "
                "does not exist is made)")
    earlier = _earlier_runs(out)
    if not earlier or overwrite:
        return None
    shown = ", ".join(p.name for p in earlier[:3]) + (", ..." if len(earlier) > 3 else "")
    return (f"--out {out} already holds {len(earlier)} run folder"
            f"{'s' if len(earlier) != 1 else ''} of an earlier replay ({shown}): `report` "
            "would mix them with these; give a new folder, or --overwrite to replace them")


def _remove_earlier(out: Path) -> None:
    """--overwrite: the earlier replay's run folders go (nothing else of `out`)."""
    earlier = _earlier_runs(out)
    if not earlier:
        return
    for run in earlier:
        shutil.rmtree(run)
    print(f"hpcdispatch simulate: --overwrite: removed {len(earlier)} run folder"
          f"{'s' if len(earlier) != 1 else ''} of an earlier replay from {out}",
          file=sys.stderr)


@contextmanager
def _stop_at_ctrl_c() -> Iterator[Callable[[], bool]]:
    """While replays run, Ctrl-C (SIGINT) asks them to stop after the decision in progress,
    which ends as any decision does (no CP-SAT search is torn down mid-solve, in this process
    or in the embedded service); a second Ctrl-C stops at once (KeyboardInterrupt)."""
    import os
    import signal
    import threading

    asked = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield asked.is_set  # signals reach the main thread only: nothing to catch here
        return

    def ask(signum: int, frame: Any) -> None:
        if asked.is_set():
            raise KeyboardInterrupt
        asked.set()
        # os.write, not print: the handler may run while the main thread is in a print.
        os.write(2, b"\nhpcdispatch simulate: interrupted: stopping after the decision in "
                    b"progress (Ctrl-C again to stop at once)\n")

    previous = signal.signal(signal.SIGINT, ask)
    try:
        yield asked.is_set
    finally:
        signal.signal(signal.SIGINT, previous)


def _check_profile(profile: str, dispatchers: list[str], target: Any,
                   timeout: float) -> str | None:
    """Why `--profile` cannot be used (not one of the server's profiles, or no dispatcher of
    the run uses a profile: the baselines ignore it), or None; warns when some dispatchers of
    the run ignore it (their runs record no profile)."""
    if not profile:
        return None
    from hpcdispatch.catalog import CP_DISPATCHER_NAMES, DISPATCHER_NAMES
    from hpcdispatch.retired_profiles import retired_profile

    from .replay import describe_target

    described = describe_target(target, timeout)
    names = described.profiles
    where = f"the server at {target}" if isinstance(target, str) else "the service"
    if names and profile not in names:
        retired = retired_profile(profile)  # said as the server's config error says it
        return (f"--profile {profile}: {retired + '; ' if retired else ''}{where} has no such "
                f"search profile; one of {', '.join(sorted(names))}")
    default = described.default_dispatcher
    resolved = [default if d == DEFAULT else d for d in dispatchers]
    # The built-in baselines; a plugin may read the profile's settings from its control.
    ignoring = [d for d in resolved if d in DISPATCHER_NAMES and d not in CP_DISPATCHER_NAMES]
    applies = (f"--profile {profile} applies to the CP dispatchers "
               f"({', '.join(CP_DISPATCHER_NAMES)}) only; "
               f"{', '.join(ignoring)} ignore{'s' if len(ignoring) == 1 else ''} it")
    if len(ignoring) == len(resolved):
        return f"{applies}: drop --profile, or add a CP dispatcher"
    if ignoring:
        print(f"hpcdispatch simulate: warning: {applies} (their runs record no profile)",
              file=sys.stderr)
    return None


def _selections(
    args: argparse.Namespace, trace: Path
) -> list[tuple[str, Collection[int] | None, dict[str, int] | None]]:
    """(run name suffix, records to replay, sequence description) per replay of a dispatcher."""
    from .record_window import check_window, parse_window

    if args.records is not None:
        return [("", check_window(trace, parse_window(args.records)), None)]
    if args.sequences is None:
        return [("", None, None)]
    from .sequences import draw_sequences

    drawn = draw_sequences(trace, args.sequences, args.sequence_length, args.seed)
    return [(f"seq{s.index + 1:02d}-start{s.start}", s.records, s.describe()) for s in drawn]


def run_report(args: argparse.Namespace) -> int:
    from .report import comparison_table, find_runs, one_workload, write_plots
    from .report_tables import promise_table, site_rules_table
    from .sequences import aggregate_table

    try:
        workload, runs = one_workload(find_runs(args.runs), args.mixed_traces)
    except (FileNotFoundError, ValueError) as exc:
        print(f"hpcdispatch report: {exc}", file=sys.stderr)
        return 2
    summaries = [r.summary for r in runs]
    print("\n".join(workload))
    print(comparison_table(summaries))
    if promises := promise_table(summaries):
        print(f"\nstarts reported while jobs waited (promises, estimates) against their "
              f"actual starts:\n{promises}")
    if site := site_rules_table(summaries):
        print(f"\nthe site's rules: jobs per partition, and the time its windows took (first "
              f"submission to last end):\n{site}")
    if any("sequence" in s for s in summaries):
        print()
        print(aggregate_table(summaries))
    if not args.no_plots:
        first = args.runs[0]
        out = args.out or ((first if not (first / "summary.json").exists() else first.parent)
                           / "report")
        for path in write_plots(runs, out):
            print(f"wrote {path}")
    return 0
