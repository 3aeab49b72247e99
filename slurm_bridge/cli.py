"""`hpcdispatch slurm-bridge`: the argparse subcommand that runs the bridge daemon."""

from __future__ import annotations

import argparse
import signal
import sys
from types import FrameType
from typing import TYPE_CHECKING

from hpcdispatch.catalog import (
    DISPATCHER_NAMES,
    PREDICTOR_NAMES,
    dispatcher_names,
    predictor_names,
)
from hpcdispatch.v1 import dispatcher_pb2 as pb

if TYPE_CHECKING:
    from .bridge import BridgeConfig


# As `hpcdispatch serve --log-format / --log-level` (hpcdispatch.server.logging_config).
LOG_FORMATS = ("auto", "json", "console")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def _log_format(value: str) -> str:
    return "console" if value == "kv" else value  # kv: the bridge's earlier name of console


def _renderer(log_format: str) -> str:
    """The bridge's renderer ("json" or "kv") for a --log-format."""
    if log_format == "auto":
        return "kv" if sys.stderr.isatty() else "json"
    return "json" if log_format == "json" else "kv"


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the `slurm-bridge` subcommand (sets func=run)."""
    p = subparsers.add_parser(
        "slurm-bridge",
        help="dispatch held Slurm jobs through an hpcdispatch service",
        description="Reads squeue/sinfo, asks the service which held jobs of the given "
        "partitions start now and where, then pins them (scontrol update NodeList=) and "
        "releases them. See docs/slurm-bridge.md.",
    )
    p.add_argument("--target", default="127.0.0.1:50051", help="host:port of the service")
    p.add_argument("--partition", action="append", required=True, dest="partitions",
                   help="managed partition (repeatable)")
    p.add_argument("--interval", type=float, default=10.0, help="seconds between cycles")
    p.add_argument("--dry-run", action="store_true", help="print decisions, change nothing")
    p.add_argument("--once", action="store_true", help="run a single cycle and exit")
    p.add_argument("--metrics-port", type=int, default=0,
                   help="serve Prometheus /metrics on this port (0 = off)")
    p.add_argument("--metrics-addr", default="0.0.0.0", help="address of the metrics server")
    # The names registered here (the built-ins and the plugins installed beside the bridge);
    # the service must offer a plugin's too (DescribeService).
    p.add_argument("--dispatcher", choices=sorted(dispatcher_names()),
                   help="dispatcher to ask for (default: the server's)")
    p.add_argument("--predictor", choices=sorted(predictor_names()),
                   help="duration predictor (default: the server's)")
    p.add_argument("--profile", default="",
                   help="search profile of the CP dispatchers, one of the server's (`book`: "
                   "the promise book); default: the server's")
    p.add_argument("--promise-after", type=int, metavar="SECONDS", dest="promise_after_s",
                   help="with the promise book: how long a held job waits before it holds a "
                   "promise, a rung of its ladder (0: every held job from its arrival; "
                   "docs/dispatchers.md); default: the profile's")
    p.add_argument("--no-promise-comments", action="store_true",
                   help="do not show held jobs' promised starts (\"starts by\", with the "
                   "likely start beside it) in their Comment (squeue -o %%k)")
    p.add_argument("--cluster", default="", help="knowledge-base name at the service")
    p.add_argument("--dispatch-timeout", type=float, default=30.0,
                   help="deadline of one decision call (session or Dispatch), seconds")
    p.add_argument("--max-backoff", type=float, default=300.0,
                   help="longest wait between cycles after repeated errors, seconds")
    p.add_argument("--start-timeout", type=float, default=60.0,
                   help="hold a released job again if Slurm has not started it by then")
    p.add_argument("--no-memory", action="store_true", help="do not model memory ('mem')")
    p.add_argument("--default-walltime", type=int, default=86_400,
                   help="seconds assumed for jobs without a time limit")
    p.add_argument("--no-reservations", action="store_true",
                   help="do not read `scontrol show reservation` (no windows in the snapshot)")
    p.add_argument("--no-completions", action="store_true",
                   help="do not report finished jobs to the predictors")
    p.add_argument("--full-snapshots", action="store_true",
                   help="send every snapshot whole (Dispatch) instead of the changes to a "
                   "session (the default)")
    p.add_argument("--slurm-bin-dir", default="", help="directory of squeue/sinfo/scontrol")
    p.add_argument("--slurm-timeout", type=float, default=30.0,
                   help="timeout of one Slurm command, seconds")
    p.add_argument("--log-format", choices=LOG_FORMATS, default="auto", type=_log_format,
                   help="json lines, readable console (key=value) lines, or auto (console on "
                   "a terminal), as hpcdispatch serve's (kv: console)")
    p.add_argument("--log-level", choices=LOG_LEVELS, default="info")
    p.set_defaults(func=run)


def config_from_args(args: argparse.Namespace) -> BridgeConfig:
    """The BridgeConfig the flags give."""
    from .bridge import BridgeConfig

    return BridgeConfig(
        partitions=frozenset(args.partitions),
        interval=args.interval,
        dry_run=args.dry_run,
        # A built-in by its enum value (every server knows it), a plugin by its name.
        dispatcher=DISPATCHER_NAMES.get(args.dispatcher or "", pb.DISPATCHER_UNSPECIFIED),
        predictor=PREDICTOR_NAMES.get(args.predictor or "", pb.PREDICTOR_UNSPECIFIED),
        dispatcher_name="" if args.dispatcher in (None, *DISPATCHER_NAMES) else args.dispatcher,
        predictor_name="" if args.predictor in (None, *PREDICTOR_NAMES) else args.predictor,
        cluster=args.cluster,
        dispatch_timeout=args.dispatch_timeout,
        max_backoff=args.max_backoff,
        start_timeout=args.start_timeout,
        track_memory=not args.no_memory,
        default_walltime=args.default_walltime,
        report_completions=not args.no_completions,
        reservations=not args.no_reservations,
        full_snapshots=args.full_snapshots,
        profile=args.profile,
        promise_after_s=args.promise_after_s,
        promise_comments=not args.no_promise_comments,
    )


def run(args: argparse.Namespace) -> int:
    """Run the bridge until SIGTERM/SIGINT (or one cycle with --once)."""
    from hpcdispatch.client import DispatcherClient

    from .bridge import Bridge
    from .logging_setup import configure_logging
    from .metrics import BridgeMetrics
    from .slurm_cli import SlurmCommands

    configure_logging(_renderer(args.log_format), args.log_level)
    config = config_from_args(args)
    metrics = BridgeMetrics()
    if args.metrics_port:
        metrics.serve(args.metrics_port, args.metrics_addr)
    # The gRPC client retries UNAVAILABLE itself; keep that short, the bridge backs off.
    client = DispatcherClient(args.target, timeout=args.dispatch_timeout, retries=2)
    slurm = SlurmCommands(bin_dir=args.slurm_bin_dir, timeout=args.slurm_timeout)
    # Decisions through one session (deltas) unless --full-snapshots; closed when run() ends.
    bridge = Bridge(config, slurm, client, metrics)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        bridge.log.info("stop_signal", signal=signal.Signals(signum).name)
        bridge.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        return bridge.run(once=args.once)
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry point: `python -m hpcdispatch.slurm_bridge.cli ...`."""
    parser = argparse.ArgumentParser(prog="hpcdispatch")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
