"""One replay run end to end: trace + system + settings -> outputs in a run directory.

The service is reached at a target: the "host:port" of a gRPC service (the embedded one by
default, adapter.service_target), or the service in this process (`LocalService`,
in_process_backend.py), which gives the same decisions without the transport.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Collection
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from hpcdispatch.catalog import CP_DISPATCHER_NAMES, DISPATCHER_NAMES
from hpcdispatch.site_calendar import TraceClock
from hpcdispatch.systems import System
from hpcdispatch.v1 import dispatcher_pb2 as pb

from .adapter import (
    DEFAULT,
    DispatchSettings,
    GrpcBackend,
    describe_service,
    search_label,
)
from .backend import DispatchBackend, ServiceFacts
from .outputs import INCOMPLETE, RunRecorder, write_summary
from .record_window import describe, iter_selected_jobs
from .simulator import ReplayInterrupted, ReplayOptions, Simulator
from .swf import CleaningStats, SwfHeader, iter_jobs, read_header
from .window_calendar import WindowCalendar
from .workload import MAX_NODES, UnitMode, UnitRule, resolve_system, rule_for_system

if TYPE_CHECKING:
    from hpcdispatch.client import DispatcherClient

    from .in_process_backend import LocalService

BUNDLED_TRACE = "KTH-SP2-1996-2.1-cln.slice.swf.xz"
BUNDLED_NAME = "kth-sp2-slice"

# Short names of the traces shipped in the package (data/README.md), for --trace.
SHIPPED_TRACES: dict[str, str] = {
    BUNDLED_NAME: BUNDLED_TRACE,
    "kth-sp2": "KTH-SP2-1996-2.1-cln.swf.xz",
    "llnl-atlas": "LLNL-Atlas-2006-2.1-cln.swf.xz",
    "lublin-256": "lublin_256.swf.xz",
    "lublin-256-est": "lublin_256_est.swf.xz",
}


def shipped_trace(file_name: str) -> Path:
    """A trace file shipped in the package's data folder."""
    path = resources.files("hpcdispatch.sim_adapter").joinpath("data", file_name)
    return Path(str(path))


def bundled_trace() -> Path:
    """The slice of a real trace shipped in the package (see data/README.md)."""
    return shipped_trace(BUNDLED_TRACE)


def resolve_trace(spec: str | Path | None) -> Path:
    """The trace file `spec` names: a shipped trace's short name (SHIPPED_TRACES), a path to
    an SWF file (plain, .gz or .xz), or None for the bundled slice. Raises ValueError, naming
    the short names, when `spec` is neither a short name nor an existing file."""
    if spec is None:
        return bundled_trace()
    text = str(spec)
    if text in SHIPPED_TRACES:
        return shipped_trace(SHIPPED_TRACES[text])
    path = Path(text)
    names = ", ".join(SHIPPED_TRACES)
    if path.is_dir():
        raise ValueError(f"--trace {text}: is a directory; give an SWF file (plain, .gz or "
                         f".xz) or a shipped trace's name ({names})")
    if not path.exists():
        raise ValueError(f"--trace {text}: no such file, and not a shipped trace's name "
                         f"({names})")
    return path


def trace_name(path: Path) -> str:
    name = path.name
    for suffix in (".xz", ".gz", ".swf"):
        name = name.removesuffix(suffix)
    return name


@dataclass(frozen=True, slots=True)
class RunSpec:
    trace: Path
    settings: DispatchSettings
    system: str | None = None  # preset, file, NODESxCORES; None = from the header
    unit_mode: UnitMode = "node"
    proc_scale: float = 1.0  # cores per trace processor (workload.UnitRule)
    accelerator_share: float = 0.0  # share of small jobs asking for a GPU / MIC
    limit_jobs: int | None = None
    charge_decision_time: bool = False
    progress: bool = False
    timeout: float = 120.0  # deadline of each call, seconds
    full_snapshots: bool = False  # Dispatch with whole snapshots instead of a session
    unary_sessions: bool = False  # the session's unary calls instead of a session stream
    # Job records to replay (0-based over the file's job lines, record_window); None = all.
    records: Collection[int] | None = None
    max_nodes: int = MAX_NODES  # the largest system built (workload.resolve_system)
    # The service is the replay's own (the embedded one): completions that its predictor does
    # not read are not reported (GrpcBackend's own_service).
    own_service: bool = False


def _resolved(settings: DispatchSettings, described: ServiceFacts) -> tuple[str, str]:
    dispatcher = settings.dispatcher
    if dispatcher == DEFAULT:
        dispatcher = described.default_dispatcher or DEFAULT
    elif dispatcher not in (described.dispatchers or DISPATCHER_NAMES):
        # A plugin's name the service does not offer (a service older than names lists none,
        # and would answer with its default): say so before replaying anything.
        offers = ", ".join(described.dispatchers) or "its built-ins only"
        raise ValueError(f"the service does not offer the dispatcher {dispatcher!r} (it offers "
                         f"{offers}): is its plugin installed where the service runs?")
    predictor = settings.predictor
    if predictor == DEFAULT:
        predictor = described.default_predictor or DEFAULT
    return dispatcher, predictor


def run_label(spec: RunSpec, dispatcher: str, predictor: str, profile: str) -> str:
    """`dispatcher[(default)][-profile]-predictor[-allocator][-charged]`: the search profile
    for the CP dispatchers, which use one (the baselines ignore it)."""
    parts = [dispatcher if spec.settings.dispatcher != DEFAULT else f"{dispatcher}(default)"]
    if dispatcher in CP_DISPATCHER_NAMES and profile:
        parts.append(profile + search_label(spec.settings.search))
    parts.append(predictor)
    if spec.settings.allocator != DEFAULT:
        parts.append(spec.settings.allocator)
    if spec.charge_decision_time:
        parts.append("charged")
    return "-".join(parts)


def safe_dirname(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", label)


class _ClosingBackend(DispatchBackend, Protocol):
    def close(self) -> None: ...


def describe_target(target: str | LocalService, timeout: float) -> ServiceFacts:
    """What the service at `target` says of itself."""
    if not isinstance(target, str):
        return target.describe()
    from hpcdispatch.client import DispatcherClient  # grpc: for a service on the wire alone

    with DispatcherClient(target, timeout=timeout) as client:
        return describe_service(client, min(timeout, 15.0))


def replay(spec: RunSpec, target: str | LocalService, out_dir: Path | None, *,
           interrupted: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Replay `spec.trace` through the service at `target`; returns (and writes) the summary.
    `interrupted` is asked between decisions: once it says True the replay stops with
    ReplayInterrupted, and `out_dir` says it is incomplete (INCOMPLETE) instead of a summary."""
    if not isinstance(target, str):
        return _replay(spec, target.describe(), target.backend, "in-process", out_dir,
                       interrupted)
    from hpcdispatch.client import DispatcherClient  # grpc: for a service on the wire alone

    with DispatcherClient(target, timeout=spec.timeout) as client:
        path, backend_for = grpc_path(spec, client)
        return _replay(spec, describe_service(client, min(spec.timeout, 15.0)), backend_for,
                       path, out_dir, interrupted)


def grpc_path(spec: RunSpec, client: DispatcherClient) -> tuple[
        str, Callable[[pb.DispatchRequest], _ClosingBackend]]:
    """How a replay reaches a gRPC service (the summary's `path`) and its backend: whole
    snapshots (grpc-dispatch), a session's unary calls (grpc-session), or a session stream fed
    the simulator's changes (grpc-stream, the default)."""
    from .stream_backend import StreamBackend

    own = spec.own_service
    if spec.full_snapshots:
        return "grpc-dispatch", lambda template: GrpcBackend(
            client, template, spec.timeout, full_snapshots=True, own_service=own)
    if spec.unary_sessions:
        return "grpc-session", lambda template: GrpcBackend(client, template, spec.timeout,
                                                            own_service=own)
    return "grpc-stream", lambda template: StreamBackend(client, template, spec.timeout,
                                                         own_service=own)


def system_of(trace: Path, system: str | None, max_nodes: int = MAX_NODES,
              header: SwfHeader | None = None) -> System:
    """The system a replay of `trace` builds (`system`: a preset, or None for the trace's
    header); SwfFormatError or ValueError, naming what is wrong, where it cannot be built."""
    return resolve_system(system, read_header(trace) if header is None else header,
                          name=trace_name(trace), max_nodes=max_nodes)


def _replay(
    spec: RunSpec, described: ServiceFacts,
    backend_for: Callable[[pb.DispatchRequest], _ClosingBackend], path: str,
    out_dir: Path | None, interrupted: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    header = read_header(spec.trace)
    system = system_of(spec.trace, spec.system, spec.max_nodes, header)
    rule = rule_for_system(system, spec.unit_mode, spec.proc_scale, spec.accelerator_share)
    cleaning = CleaningStats()
    dispatcher, predictor = _resolved(spec.settings, described)
    profile = spec.settings.profile or described.default_profile
    if dispatcher in DISPATCHER_NAMES and dispatcher not in CP_DISPATCHER_NAMES:
        profile = ""  # a baseline searches nothing: no profile applies, none is recorded
    label = run_label(spec, dispatcher, predictor, profile)
    # A knowledge base of its own per run: runs on one server do not share history.
    cluster = f"replay-{safe_dirname(label)}-{uuid.uuid4().hex[:8]}"
    settings = DispatchSettings(
        dispatcher=spec.settings.dispatcher, predictor=spec.settings.predictor,
        allocator=spec.settings.allocator, profile=spec.settings.profile, cluster=cluster,
        deterministic=spec.settings.deterministic, search=spec.settings.search,
    )
    recorder = RunRecorder(out_dir)
    total = spec.limit_jobs if spec.limit_jobs is not None else (
        len(spec.records) if spec.records is not None else header.max_records
    )
    jobs = (
        iter_jobs(spec.trace, cleaning, spec.limit_jobs) if spec.records is None
        else iter_selected_jobs(spec.trace, spec.records, cleaning, spec.limit_jobs)
    )
    backend = backend_for(settings.template())
    calendar = window_calendar(system, header)
    simulator = Simulator(
        system, rule, backend, recorder,
        ReplayOptions(
            charge_decision_time=spec.charge_decision_time,
            oracle=predictor == "oracle",
            progress=spec.progress,
            expected_jobs=total,
            progress_label=f"{label} on {trace_name(spec.trace)}",
            interrupted=interrupted,
        ),
        calendar=calendar,
    )
    cpu_before = time.process_time()
    try:
        result = simulator.run(jobs)
    except ReplayInterrupted as stopped:
        if out_dir is not None:
            write_incomplete(out_dir, label, spec.trace, total, stopped)
        raise
    finally:
        recorder.close()
        backend.close()
    replay_cpu = time.process_time() - cpu_before
    total_cores = sum(n.capacity.get("core", 0) for n in simulator.nodes)
    meta = _run_meta(spec, label, system, rule, total_cores, (dispatcher, predictor, profile),
                     described.version, path, replay_cpu)
    summary = recorder.summary(
        first_submit=result.first_submit, last_end=result.last_end, total_cores=total_cores,
        replay_seconds=result.wall_seconds, meta=meta, cleaning=cleaning.as_dict(),
    )
    if calendar:
        since, until = result.first_submit or 0, result.last_end or 0
        summary["unavailability"] = {
            "clock": {"unix_start": calendar.clock.unix_start, "zone": str(calendar.clock.zone)},
            "first_submit_to_last_end": calendar.lost(
                since, until, {n.id: n.capacity.get("core", 0) for n in simulator.nodes}),
        }
    if out_dir is not None:
        write_summary(out_dir / "summary.json", summary)
    return summary


def window_calendar(system: System, header: SwfHeader) -> WindowCalendar:
    """The system's windows on the trace's clock (its header's UnixStartTime and
    TimeZoneString; hpcdispatch.site_calendar)."""
    return WindowCalendar(system.windows, TraceClock.of_header(
        header.unix_start_time, header.get("TimeZoneString")))


def _run_meta(
    spec: RunSpec, label: str, system: System, rule: UnitRule, total_cores: int,
    resolved: tuple[str, str, str], server_version: str, path: str, replay_cpu: float,
) -> dict[str, Any]:
    """What a run's summary says of its trace, system, settings and path."""
    dispatcher, predictor, profile = resolved
    return {
        "label": label,
        "trace": str(spec.trace),
        "system": {"name": system.name, "nodes": system.node_count, "cores": total_cores,
                   # a site's rules, for a system that has them: nodes per partition, windows
                   **({"partitions": {name: len(nodes)
                                      for name, nodes in system.partitions.items()},
                       "windows": len(system.windows)}
                      if system.partitions or system.windows else {}),
                   # the features the jobs of a partition / an SWF queue require
                   **({"job_features": {
                       "partitions": {p: _features_shown(r)
                                      for p, r in system.partition_features.items()},
                       "swf_queues": {str(q): _features_shown(r)
                                      for q, r in system.swf_queue_features.items()}}}
                      if system.partition_features or system.swf_queue_features else {})},
        "unit_rule": {"mode": rule.mode, "cores_per_node": rule.cores_per_node,
                      "proc_scale": rule.proc_scale,
                      "accelerator_share": rule.accelerator_share,
                      "accelerators": [kind for kind, _ in rule.accelerators]},
        "dispatcher": dispatcher,
        "dispatcher_requested": spec.settings.dispatcher,
        "predictor": predictor,
        "allocator": spec.settings.allocator,
        "profile": profile,
        "search": dict(spec.settings.search),  # SearchParameters set over the profile's
        "charge_decision_time": spec.charge_decision_time,
        "limit_jobs": spec.limit_jobs,
        "records": describe(spec.records) if spec.records is not None else None,
        "deterministic_search": spec.settings.deterministic,
        "server_version": server_version,
        "path": path,  # how the service was reached: grpc-stream, grpc-session, grpc-dispatch,
        # in-process
        # CPU seconds of this process over the replay (the embedded service's threads
        # included; a service elsewhere not).
        "replay_cpu_seconds": round(replay_cpu, 3),
    }


def write_incomplete(out_dir: Path, label: str, trace: Path, expected_jobs: int | None,
                     stopped: ReplayInterrupted) -> None:
    """INCOMPLETE in a run folder whose replay was interrupted: what it holds and why it has
    no summary.json (`hpcdispatch report` skips it, saying so)."""
    of = f" of {expected_jobs:,}" if expected_jobs is not None else ""
    write_summary(out_dir / INCOMPLETE, {
        "label": label,
        "trace": str(trace),
        "reason": (f"interrupted (Ctrl-C) at simulated time t={stopped.time}, after "
                   f"{stopped.decisions:,} decisions, with {stopped.finished:,}{of} jobs "
                   f"finished ({stopped.queued:,} queued, {stopped.running:,} running): "
                   "jobs.csv and decisions.csv hold what was done, there is no summary.json"),
        "time": stopped.time, "decisions": stopped.decisions,
        "jobs_finished": stopped.finished, "jobs_expected": expected_jobs,
        "queued": stopped.queued, "running": stopped.running,
    })


def _features_shown(rules: tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]
                    ) -> dict[str, list[Any]]:
    """A job's feature rules in a summary: the features it requires (all) and the terms of
    which each of its nodes has one (each term all of its features)."""
    required, alternatives = rules
    return {"required": list(required), "one_of": [list(term) for term in alternatives]}
