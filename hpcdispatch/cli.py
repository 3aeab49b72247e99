"""The `hpcdispatch` command: serve, dispatch, and the tools built on the service."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from hpcdispatch import __version__
from hpcdispatch.catalog import dispatcher_names, predictor_names, select_dispatcher
from hpcdispatch.start_table import start_table
from hpcdispatch.v1 import dispatcher_pb2 as pb

if TYPE_CHECKING:  # loaded by `dispatch` alone: an in-process replay needs no grpc
    import grpc

EXAMPLE_SNAPSHOT = "eurora_snapshot.json"


def _profiles() -> tuple[list[str], str]:
    """(names of the search profiles, the default one), from the profile table."""
    from hpcdispatch.server.domain.profiles import DEFAULT_PROFILE, PROFILES

    return sorted(PROFILES), DEFAULT_PROFILE


def _add_serve(sub: argparse._SubParsersAction, with_profiles: bool = True) -> None:
    """`with_profiles`: check --default-profile against the profile table; that imports the
    dispatchers (about 2 s), which only `serve` needs."""
    profiles, default_profile = _profiles() if with_profiles else (None, "book")
    p = sub.add_parser("serve", help="run the gRPC dispatching service",
                       description="Run the service. Keys: docs/configuration.md; precedence: "
                       "flags > HPCDISPATCH_* environment > --config file > defaults.")
    p.add_argument("--config", help="YAML configuration file")
    p.add_argument("--listen", help="host:port to listen on (default 127.0.0.1:50051)")
    p.add_argument("--workers", type=int, help="gRPC worker threads")
    # Every registered name: the built-ins and the installed plugins (docs/plugins.md).
    p.add_argument("--default-dispatcher", choices=sorted(dispatcher_names()))
    p.add_argument("--default-predictor", choices=sorted(predictor_names()))
    p.add_argument("--default-profile", choices=profiles, metavar=None if profiles else "PROFILE",
                   help=f"search profile of the CP dispatchers (default: {default_profile}; "
                   "docs/dispatchers.md: Modes)")
    p.add_argument("--max-nodes", type=int, help="largest snapshot, in nodes")
    p.add_argument("--max-jobs", type=int, help="largest snapshot, in running + queued jobs")
    p.add_argument("--predictor-store",
                   help="the predictors' knowledge base: a SQLite file path, or a "
                   "postgresql://user@host/db URL shared by replicas (default: in memory)")
    p.add_argument("--grace-seconds", type=float,
                   help="on SIGTERM, time in-flight decisions get to finish")
    p.add_argument("--metrics-port", type=int,
                   help="serve Prometheus /metrics on this HTTP port (0: off, the default)")
    p.add_argument("--metrics-host", help="address /metrics binds to (default: the --listen host)")
    p.add_argument("--log-format", choices=("auto", "json", "console"),
                   help="json lines, readable console lines, or auto (console on a terminal)")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error", "critical"))
    p.add_argument("--tls-cert", help="PEM certificate chain of the server (TLS with --tls-key)")
    p.add_argument("--tls-key", help="PEM private key of the server")
    p.add_argument("--tls-client-ca",
                   help="PEM CA bundle; clients must present a certificate it signed (mTLS)")
    p.set_defaults(func=_serve)


SERVE_KEYS = (
    "listen", "workers", "default_dispatcher", "default_predictor", "default_profile",
    "max_nodes", "max_jobs", "predictor_store", "grace_seconds", "metrics_port", "metrics_host",
    "log_format", "log_level", "tls_cert", "tls_key", "tls_client_ca",
)


def _serve(args: argparse.Namespace) -> int:
    import yaml

    from hpcdispatch.server.config import load_config
    from hpcdispatch.server.rpc.app import serve

    try:
        config = load_config(args.config, overrides={k: getattr(args, k) for k in SERVE_KEYS})
    except OSError as exc:
        print(f"hpcdispatch serve: cannot read --config {_os_error(str(exc.filename), exc)}",
              file=sys.stderr)
        return 2
    except (ValueError, yaml.YAMLError) as exc:
        # Every invalid key, one per line, each naming its source (file, environment, flag).
        print(f"hpcdispatch serve: {exc}", file=sys.stderr)
        return 2
    try:
        serve(config)
    except OSError as exc:  # a busy port (PortInUseError names its key), an unbindable host
        print(f"hpcdispatch serve: {exc}", file=sys.stderr)
        return 2
    return 0


def _add_dispatch(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dispatch",
        help="send a snapshot (protobuf JSON DispatchRequest) and print the decision",
        description="Without --target, a service is started on loopback for this one call. "
        f"Without SNAPSHOT, the bundled example hpcdispatch/examples/{EXAMPLE_SNAPSHOT} "
        "(Eurora-size, 100 queued jobs) is sent: a template for your own snapshots. After "
        "the decision, each waiting job's start is printed as squeue --start shows it: a "
        "promise's STARTS_BY (a guarantee, moved later only by a node going down or a job "
        "running past its requested time) and LIKELY (the predictor's plan), an estimate's "
        "LIKELY alone.",
    )
    p.add_argument("snapshot", nargs="?", help="DispatchRequest as protobuf JSON (default: "
                   f"hpcdispatch/examples/{EXAMPLE_SNAPSHOT})")
    p.add_argument("--target", help="host:port of a running service")
    p.add_argument("--dispatcher", choices=sorted(dispatcher_names()),
                   help="override the request's (a built-in's or an installed plugin's name)")
    p.add_argument("--profile", metavar="PROFILE",
                   help="search profile of the CP dispatchers: book (the server's default: a "
                   "job that waited 24 h holds a promise, a start guaranteed from requested "
                   "times, shown with its likely start; the others a likely start, an "
                   "estimate), qos (the lowest mean bounded slowdown, no promise) or papers; "
                   "docs/dispatchers.md, Modes; overrides the request's; default: the "
                   "service's")
    p.add_argument("--promise-after", type=int, metavar="SECONDS", dest="promise_after_s",
                   help="with the promise book (profile book, the default): how long a job "
                   "waits before it holds a promise, a rung of its ladder (0: every job from "
                   "its arrival; docs/dispatchers.md); overrides the request's; default: the "
                   "profile's")
    p.add_argument("--timeout", type=float, default=30.0, help="deadline, seconds")
    p.add_argument("--output", help="write the DispatchResponse JSON here instead of stdout")
    p.add_argument("--tls-ca", help="TLS: PEM bundle that signed the server's certificate "
                   "(with --tls-cert/--tls-key alone: the system's roots)")
    p.add_argument("--tls-cert", help="mutual TLS: PEM certificate chain of this client")
    p.add_argument("--tls-key", help="mutual TLS: PEM private key of this client")
    p.add_argument("--tls-server-name",
                   help="TLS: name to check in the server's certificate instead of the target's")
    p.set_defaults(func=_dispatch)


# Keys the embedded service does not take from the environment: how a service is reached and
# what it logs (it listens on loopback, in plaintext, without metrics, quietly).
NOT_EMBEDDED = (
    "listen", "metrics_port", "metrics_host", "metrics_tls_cert", "metrics_tls_key",
    "metrics_tls_client_ca", "metrics_basic_auth_user", "metrics_basic_auth_password_hash",
    "tls_cert", "tls_key", "tls_client_ca", "tls_client_identities", "log_format", "log_level",
)


def _embedded_or_remote(target: str | None) -> AbstractContextManager[str]:
    """The target given, or an embedded service configured as `serve` would be from the
    environment (HPCDISPATCH_DEFAULT_PROFILE, ..., but NOT_EMBEDDED)."""
    if target:
        return nullcontext(target)
    from hpcdispatch.server.config import load_config
    from hpcdispatch.server.rpc.embedded import embedded_server

    try:
        config = load_config()
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    return embedded_server(**{f.name: getattr(config, f.name) for f in dataclasses.fields(config)
                              if f.name not in NOT_EMBEDDED})


def _credentials(args: argparse.Namespace) -> grpc.ChannelCredentials | None:
    """TLS credentials from --tls-* flags; None (plaintext) when none is given."""
    from hpcdispatch.client.tls import channel_credentials

    if not (args.tls_ca or args.tls_cert or args.tls_key):
        return None
    if not args.target:
        raise SystemExit("hpcdispatch dispatch: --tls-* flags need --target")
    return channel_credentials(args.tls_ca, args.tls_cert, args.tls_key)


def _describe_error(exc: grpc.RpcError) -> str:
    """The status and, for INVALID_ARGUMENT, every field violation on its own line."""
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status

    lines = [f"hpcdispatch dispatch: {exc.code().name}: {exc.details()}"]
    status = rpc_status.from_call(exc)  # type: ignore[arg-type]
    for detail in status.details if status is not None else ():
        bad = error_details_pb2.BadRequest()
        if detail.Unpack(bad):
            lines.extend(f"  {v.field}: {v.description}" for v in bad.field_violations)
    return "\n".join(lines)


class UsageError(Exception):
    """A problem with the command's input or options, reported as one line (exit code 2)."""


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _os_error(path: str, exc: OSError) -> str:
    """"x.json: No such file or directory" rather than a traceback."""
    return f"{path}: {exc.strerror or type(exc).__name__}"


def _read_snapshot(path: str | None) -> str:
    """The snapshot's text: the file at `path`, or the bundled example."""
    if not path:
        return resources.files("hpcdispatch.examples").joinpath(EXAMPLE_SNAPSHOT).read_text(
            encoding="utf-8")
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 text (byte {exc.start}): a snapshot is protobuf "
                         "JSON") from exc
    except OSError as exc:
        raise UsageError(f"cannot read {_os_error(path, exc)}") from exc


def _check_output(path: str) -> None:
    """Fail before the call, not after it, when the decision could not be written."""
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        raise UsageError(f"--output {path}: is a directory")
    if not parent.is_dir():
        raise UsageError(f"--output {path}: directory {parent} does not exist")
    if not os.access(target if target.exists() else parent, os.W_OK):
        raise UsageError(f"--output {path}: permission denied")


def _dispatch(args: argparse.Namespace) -> int:
    try:
        return _dispatch_checked(args)
    except UsageError as exc:
        print(f"hpcdispatch dispatch: {_one_line(exc)}", file=sys.stderr)
        return 2


def _dispatch_checked(args: argparse.Namespace) -> int:
    import grpc
    from google.protobuf import json_format

    from hpcdispatch.client import DispatcherClient

    try:
        credentials = _credentials(args)
    except OSError as exc:
        raise UsageError(f"cannot read TLS file {_os_error(str(exc.filename), exc)}") from exc
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    options = (
        [("grpc.ssl_target_name_override", args.tls_server_name)] if args.tls_server_name else []
    )
    if args.output:
        _check_output(args.output)
    text = _read_snapshot(args.snapshot)
    try:
        request = json_format.Parse(text, pb.DispatchRequest())
    except json_format.ParseError as exc:
        raise UsageError(f"{args.snapshot}: not a DispatchRequest in protobuf JSON: {exc}"
                         ) from exc
    if args.dispatcher:
        request.dispatcher, request.dispatcher_name = pb.DISPATCHER_UNSPECIFIED, ""
        select_dispatcher(request, args.dispatcher)
    if args.profile:
        request.search.profile = args.profile
    if args.promise_after_s is not None:
        if abs(args.promise_after_s) > 2**31 - 1:  # an int32 field; the service checks the rest
            raise UsageError(f"--promise-after {args.promise_after_s}: beyond the largest "
                             f"value, {2**31 - 1:,} s (the ladder's head rung)")
        request.search.promise_after_s = args.promise_after_s
    with (
        _embedded_or_remote(args.target) as target,
        DispatcherClient(target, credentials=credentials, extra_options=options) as client,
    ):
        try:
            response = client.dispatch(request, timeout=args.timeout)
        except grpc.RpcError as exc:
            print(_describe_error(exc), file=sys.stderr)
            return 1
    out = json_format.MessageToJson(response, indent=2, preserving_proto_field_name=True)
    if args.output:
        try:
            Path(args.output).write_text(out + "\n", encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write --output {_os_error(args.output, exc)}") from exc
    else:
        print(out)
    report = response.report
    print(
        f"{pb.Dispatcher.Name(report.dispatcher) if report.dispatcher else report.dispatcher_name}"
        f": {len(response.starts)} of "
        f"{len(request.queued_jobs)} queued jobs start now; status "
        f"{pb.SolveStatus.Name(report.status)}; {report.total_seconds * 1000:.1f} ms",
        file=sys.stderr,
    )
    print(start_table(request, response), file=sys.stderr)
    return 0


def build_parser(serve_profiles: bool = True) -> argparse.ArgumentParser:
    """The whole command line; `serve_profiles=False` skips loading the profile table for
    `serve --default-profile` (for commands other than serve)."""
    parser = argparse.ArgumentParser(prog="hpcdispatch", description=__doc__)
    parser.add_argument("--version", action="version", version=f"hpcdispatch {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_serve(sub, serve_profiles)
    _add_dispatch(sub)
    from hpcdispatch.sim_adapter.cli import register as register_simulation
    from hpcdispatch.slurm_bridge.cli import register as register_slurm_bridge

    register_simulation(sub)
    register_slurm_bridge(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(serve_profiles="serve" in words)
    args, unknown = parser.parse_known_args(words)
    if unknown:
        # The subcommand's usage, not the top-level one, names what the subcommand takes.
        subparsers = next(a for a in parser._actions
                          if isinstance(a, argparse._SubParsersAction))
        subparsers.choices[args.command].error(f"unrecognized arguments: {' '.join(unknown)}")
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
