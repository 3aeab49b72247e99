"""Send every instance to every dispatcher and record one row per (instance, dispatcher, profile).

Dispatchers run back to back on each instance (interleaved, not one whole set after another),
so that load changes on a shared machine hit all of them alike.

Decision quality is measured on the *decision* (the jobs started now), the one thing every
dispatcher produces: the model objective of the CP dispatchers also scores planned future
starts, which FCFS and EASY do not have, and each CP model counts only the jobs it considered.
For the started jobs S, with d_i the duration the service used (JobStart.expected_duration; the
same for every dispatcher under a deterministic predictor):

- ``started_jobs`` = |S|;
- ``started_core_seconds`` = Σ_S rn_i × cores per unit × d_i (work put on the machine now);
- ``started_priority`` = Σ_S (t - q_i + d_i) / d_i, the papers' priority (current slowdown)
  summed over the started jobs: the slowdown-weighted count of jobs served now.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.same_instances.model_size import model_variables
from benchmarks.same_instances.sources import InstanceSet
from hpcdispatch.catalog import CP_DISPATCHER_NAMES, DISPATCHER_NAMES
from hpcdispatch.client import DispatcherClient
from hpcdispatch.v1 import dispatcher_pb2 as pb

CP_DISPATCHERS = CP_DISPATCHER_NAMES
ALL_DISPATCHERS = tuple(DISPATCHER_NAMES)  # the baselines, then the CP dispatchers


@dataclass(frozen=True, slots=True)
class Row:
    """One decision of one dispatcher (and profile) on one instance."""

    set: str
    system: str
    nodes: int
    instance: int
    time: int
    queued: int
    running: int
    dispatcher: str
    profile: str  # "" for FCFS / EASY
    label: str  # dispatcher, or dispatcher[profile] for a secondary profile
    status: str
    attempts: int
    variables: int  # of the model the service built (0: none)
    model_variables: int  # of the dispatcher's model, built in-process where the service built
    #                       none because every considered job starts now (0 for FCFS / EASY)
    constraints: int
    decision_ms: float  # DecisionReport.total_seconds: the service's own time
    wall_ms: float  # the whole gRPC round trip as the client saw it
    build_ms: float
    solve_ms: float
    objective: float | None  # model objective (CP dispatchers), total slowdown
    considered: int
    considered_key: str  # short hash of the considered job ids (equal sets compare)
    started_jobs: int
    started_core_seconds: int
    started_priority: float


COLUMNS = tuple(f.name for f in dataclasses.fields(Row))


def decision_measures(
    request: pb.DispatchRequest, response: pb.DispatchResponse
) -> tuple[int, int, float]:
    """(started jobs, started core-seconds, Σ priority of started jobs); module docstring."""
    queued = {job.id: job for job in request.queued_jobs}
    core_seconds, priority = 0, 0.0
    for start in response.starts:
        job = queued[start.job_id]
        d = max(1, start.expected_duration)
        core_seconds += job.units * job.unit_request.get("core", 0) * d
        priority += (request.time - job.submit_time + d) / d
    return len(response.starts), core_seconds, priority


def _considered_key(ids: Sequence[str]) -> str:
    return hashlib.sha1("\n".join(sorted(ids)).encode()).hexdigest()[:12]


def run_instances(
    sets: Sequence[InstanceSet],
    target: str,
    dispatchers: Sequence[str] = ALL_DISPATCHERS,
    profiles: Sequence[str] = ("qos",),  # `fast` until issue #49: `qos` keeps its search
    secondary_limit: int = 5,
    timeout: float = 120.0,
    progress: Callable[[str], None] | None = None,
) -> list[Row]:
    """Every dispatcher on every instance; profiles after the first only on the first
    `secondary_limit` instances of each set (CP dispatchers only)."""
    rows: list[Row] = []
    with DispatcherClient(target, timeout=timeout) as client:
        for instance_set in sets:
            started = time.perf_counter()
            for index, captured in enumerate(instance_set.requests):
                for name in dispatchers:
                    runs = [("", 0)]
                    if name in CP_DISPATCHERS:
                        runs = [(p, rank) for rank, p in enumerate(profiles)
                                if rank == 0 or index < secondary_limit]
                    for profile, rank in runs:
                        request = pb.DispatchRequest()
                        request.CopyFrom(captured)
                        request.dispatcher = pb.Dispatcher.ValueType(DISPATCHER_NAMES[name])
                        request.cluster = "same-instances"
                        request.ClearField("search")
                        if profile:
                            request.search.profile = profile
                        label = name if rank == 0 else f"{name}[{profile}]"
                        rows.append(_dispatch(client, instance_set, index, request, name,
                                              profile, label, timeout))
            if progress is not None:
                progress(f"{instance_set.name}: {len(instance_set.requests)} instances in "
                         f"{time.perf_counter() - started:.0f} s")
    return rows


def _dispatch(
    client: DispatcherClient, instance_set: InstanceSet, index: int,
    request: pb.DispatchRequest, name: str, profile: str, label: str, timeout: float,
) -> Row:
    begin = time.perf_counter()
    response = client.dispatch(request, timeout=timeout)
    wall_ms = (time.perf_counter() - begin) * 1000
    report = response.report
    jobs, core_seconds, priority = decision_measures(request, response)
    return Row(
        set=instance_set.name, system=instance_set.system, nodes=instance_set.nodes,
        instance=index, time=request.time, queued=len(request.queued_jobs),
        running=len(request.running_jobs), dispatcher=name, profile=profile, label=label,
        status=pb.SolveStatus.Name(report.status).removeprefix("SOLVE_STATUS_").lower(),
        attempts=len(report.attempts), variables=report.model_variables,
        model_variables=(
            report.model_variables or model_variables(request, name)
            if name in CP_DISPATCHERS and report.considered_job_ids else 0
        ),
        constraints=report.model_constraints, decision_ms=report.total_seconds * 1000,
        wall_ms=wall_ms, build_ms=report.build_seconds * 1000,
        solve_ms=report.solve_seconds * 1000,
        objective=report.objective if report.HasField("objective") else None,
        considered=len(report.considered_job_ids),
        considered_key=_considered_key(report.considered_job_ids),
        started_jobs=jobs, started_core_seconds=core_seconds, started_priority=priority,
    )


def write_rows(rows: Sequence[Row], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLUMNS)
        for row in rows:
            writer.writerow(["" if v is None else v for v in dataclasses.astuple(row)])


def read_rows(path: Path) -> list[Row]:
    """Rows back from `write_rows` (types restored from the dataclass fields)."""
    out = []
    with path.open(encoding="utf-8") as handle:
        for raw in csv.DictReader(handle):
            values: dict[str, object] = {}
            for field in dataclasses.fields(Row):
                text = raw[field.name]
                kind = str(field.type)
                if kind == "int":
                    values[field.name] = int(text)
                elif kind == "float":
                    values[field.name] = float(text)
                elif kind == "float | None":
                    values[field.name] = float(text) if text else None
                else:
                    values[field.name] = text
            out.append(Row(**values))  # type: ignore[arg-type]
    return out
