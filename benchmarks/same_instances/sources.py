"""Where the same-instances benchmark gets its instances: trace replays and synthetic snapshots.

`capture_replay` replays a slice of a trace with a fast dispatcher (EASY by default) through
the service and keeps every `every`-th request with at least `min_queued` queued jobs
(`instance_capture.CapturingBackend`), up to `limit`. The predictor is deterministic
(``oracle``: d_i is the actual run time carried in the request; or ``walltime``), so a saved
instance means the same thing to every dispatcher whatever the server's knowledge base holds.

The Eurora-like set replays the synthetic Lublin-256 trace on the `eurora` preset (64 nodes ×
16 cores, 32 with 2 GPUs, 32 with 2 MICs) with the accelerator knobs of the unit rule
(`hpcdispatch.sim_adapter.workload`, as `hpcdispatch simulate --proc-scale 4
--accelerator-share 0.3`): every trace processor becomes 4 cores (256 × 4 = 1,024 cores, the
load of the original), and 30 % of the jobs of at most 8 units ask for 1 or 2 GPUs or MICs per
unit, chosen by a hash of the job id. Such jobs fit only half of the nodes, which is what makes
allocation non-trivial.
"""

from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass
from pathlib import Path

from benchmarks.same_instances.capture import CaptureComplete, CapturingBackend, read_instances
from hpcdispatch.client import DispatcherClient
from hpcdispatch.proto_convert import snapshot_to_pb
from hpcdispatch.sim_adapter.adapter import DispatchSettings, GrpcBackend
from hpcdispatch.sim_adapter.outputs import RunRecorder
from hpcdispatch.sim_adapter.replay import bundled_trace
from hpcdispatch.sim_adapter.simulator import ReplayOptions, Simulator
from hpcdispatch.sim_adapter.swf import CleaningStats, iter_jobs, read_header
from hpcdispatch.sim_adapter.workload import CORE, resolve_system, rule_for_system
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import PRESETS
from hpcdispatch.v1 import dispatcher_pb2 as pb

TRACES = bundled_trace().parent  # the traces shipped in hpcdispatch.sim_adapter.data
EURORA_PROC_SCALE = 4.0  # lublin_256's 256 processors on Eurora's 1,024 cores
EURORA_ACCELERATOR_SHARE = 0.3


@dataclass(frozen=True, slots=True)
class TraceSlice:
    """A set of instances captured from a replay of `jobs` cleaned jobs after `skip`."""

    name: str
    trace: Path
    skip: int
    jobs: int
    system: str | None = None  # preset / NODESxCORES; None = from the trace header
    accelerators: bool = False  # proc scale 4 and 30 % of small jobs asking GPUs / MICs
    every: int | None = None  # keep every N-th eligible request; None = CaptureOptions.every


# Slices chosen for load (offered load of the 1,000-job window: KTH 0.95, Atlas 0.97,
# Lublin 1.49, Lublin at 2,500 1.21), so that queues are long enough to matter. Atlas (short
# jobs, about 60 ms of replay per decision at 1,152 nodes) rarely queues two jobs: keep all.
DEFAULT_SLICES: dict[str, TraceSlice] = {
    "kth-sp2": TraceSlice("kth-sp2", TRACES / "KTH-SP2-1996-2.1-cln.swf.xz", 10_000, 1_500,
                          every=10),
    "llnl-atlas": TraceSlice("llnl-atlas", TRACES / "LLNL-Atlas-2006-2.1-cln.swf.xz",
                             38_000, 1_500, every=1),
    "lublin-256": TraceSlice("lublin-256", TRACES / "lublin_256.swf.xz", 5_500, 1_500,
                             every=10),
    "eurora-lublin": TraceSlice("eurora-lublin", TRACES / "lublin_256.swf.xz", 2_500, 1_500,
                                system="eurora", accelerators=True, every=10),
}


@dataclass(frozen=True, slots=True)
class InstanceSet:
    """Named instances on one system."""

    name: str
    system: str  # label: preset name or nodes x cores
    nodes: int
    requests: tuple[pb.DispatchRequest, ...]


@dataclass(frozen=True, slots=True)
class CaptureOptions:
    limit: int = 60  # instances per set
    every: int = 5  # keep every N-th eligible request (unless the slice says)
    force_every: bool = False  # `every` also overrides the slices' own
    min_queued: int = 2
    dispatcher: str = "easy"  # drives the replay
    predictor: str = "oracle"  # oracle or walltime: deterministic d_i
    timeout: float = 60.0


def capture_replay(
    source: TraceSlice, target: str, path: Path, options: CaptureOptions
) -> InstanceSet:
    """Replay `source` through the service at `target`, saving instances to `path`."""
    if options.predictor not in ("oracle", "walltime"):
        raise ValueError("captured instances need a deterministic predictor: oracle or walltime")
    header = read_header(source.trace)
    system = resolve_system(source.system, header, name=source.name)
    rule = (rule_for_system(system, proc_scale=EURORA_PROC_SCALE,
                            accelerator_share=EURORA_ACCELERATOR_SHARE)
            if source.accelerators else rule_for_system(system))
    cluster = f"capture-{source.name}"
    settings = DispatchSettings(dispatcher=options.dispatcher, predictor=options.predictor,
                                cluster=cluster)
    jobs = itertools.islice(iter_jobs(source.trace, CleaningStats()), source.skip,
                            source.skip + source.jobs)
    with DispatcherClient(target, timeout=options.timeout) as client, path.open("wb") as handle:
        backend = CapturingBackend(GrpcBackend(client, settings.template(), options.timeout),
                                   handle,
                                   every=_every(source, options), min_queued=options.min_queued,
                                   limit=options.limit)
        simulator = Simulator(system, rule, backend, RunRecorder(None),
                              ReplayOptions(oracle=options.predictor == "oracle"))
        with contextlib.suppress(CaptureComplete):
            simulator.run(jobs)
    label = source.system or f"{system.node_count}x{system.groups[0].capacity.get(CORE, 0)}"
    return InstanceSet(source.name, label, system.node_count, tuple(read_instances(path)))


def _every(source: TraceSlice, options: CaptureOptions) -> int:
    if source.every is None or options.force_every:
        return options.every
    return source.every


def synthetic_set(
    name: str, system_name: str, count: int, predictor: str = "oracle", queued: int = 100
) -> InstanceSet:
    """`count` synthetic snapshots (hpcdispatch.synthetic), queue and load varying with seed."""
    system = PRESETS[system_name]
    requests = []
    for seed in range(count):
        busy = (0.5, 0.7, 0.9)[seed % 3]
        length = max(2, queued - (queued // 2) * (seed % 2))
        request = snapshot_to_pb(synthetic_snapshot(system, length, busy, seed=seed))
        request.predictor = pb.Predictor.Value(f"PREDICTOR_{predictor.upper()}")
        requests.append(request)
    return InstanceSet(name, system_name, system.node_count, tuple(requests))
