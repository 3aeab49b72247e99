"""From SWF processors to job units rn_i, and from a trace header to a system.

SWF records only a processor count per job. How those processors become the identical units
of the dispatching problem (rn_i units of req_i / rn_i each, one unit never spanning two
nodes) is a rule (`UnitRule`), chosen per replay:

- ``node`` (default): a job that fits in one node is one unit of its processors; a wider job
  becomes ceil(procs / cores_per_node) units of ceil(procs / units) cores each, i.e. units of
  at most a whole node. A job of 9,216 processors on 8-core nodes is 1,152 units, not 9,216,
  which keeps the CP models small for wide jobs. The rounding adds fewer than `units` cores.
- ``exclusive``: every job gets whole nodes: ceil(procs / cores_per_node) units of
  cores_per_node cores (no node sharing).
- ``core``: one unit of one core per processor (exact but large; AccaSim's convention).

Cores are the resource type ``core``. When the system also has ``mem`` and the record has a
requested memory (KB per processor), each unit also asks for its share in MiB.

Replaying a trace on another system (the papers' presets, for which no public trace exists)
takes two more knobs of the rule:

- ``proc_scale``: cores per trace processor, so the offered load carries over. LLNL-Atlas
  (1,152 × 8 cores) on KIT ForHLR II's 1,152 thin nodes of 20 cores is 2.5; lublin_256
  (256 processors) on Eurora (1,024 cores) is 4. A job asks ceil(procs × proc_scale) cores.
- ``accelerator_share``: SWF records no GPUs, so a fixed share of the small jobs (at most
  ``accelerator_max_units`` units) ask for 1 or 2 (at most what a node has) of one of the
  system's accelerator types (every resource type but ``core`` and ``mem``) per unit. Which
  jobs, which type and how many come from a CRC-32 of the job id: every replay, dispatcher
  and predictor sees the same requests. Such jobs fit only the nodes with that type (on
  Eurora half of them), which makes allocation non-trivial.

A system comes from a preset (`hpcdispatch.systems.preset_names()`), a YAML / JSON file (with
a site's rules, if any: docs/replays.md), the short form ``NODESxCORES`` (e.g. ``256x1``), or
the trace header: MaxNodes nodes of
MaxProcs / MaxNodes cores (LLNL-Atlas: 1,152 x 8), or single-core nodes when only one of
MaxProcs / MaxNodes is given (KTH-SP2: 100 x 1, lublin_256: 256 x 1). A system is sized before
any node is made: one of more than `max_nodes` nodes (MAX_NODES, the service's own default
limit, unless the caller raises it) or of more cores per node than a trace field may hold is
refused, the header's naming its line.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from hpcdispatch.systems import System, homogeneous, load_system

from .swf import MAX_FIELD_VALUE, SwfFormatError, SwfHeader, TraceJob

UnitMode = Literal["node", "exclusive", "core"]
UNIT_MODES: tuple[str, ...] = ("node", "exclusive", "core")
CORE = "core"
MEM = "mem"
_SHORT_SYSTEM = re.compile(r"^(\d+)x(\d+)$")
# The most nodes a replay builds: the service's default `max_nodes` (a larger snapshot is
# refused there). `hpcdispatch simulate --max-nodes` raises it, for a service configured so.
MAX_NODES = 200_000
TOO_MANY_NODES_HINT = "--max-nodes N raises the limit"


@dataclass(frozen=True, slots=True)
class UnitRule:
    """How a job's processors become rn_i identical units (see the module docstring)."""

    cores_per_node: int = 1
    mode: UnitMode = "node"
    with_memory: bool = True  # ask for memory when the system has "mem" and the trace says
    proc_scale: float = 1.0  # cores per trace processor
    accelerator_share: float = 0.0  # share of small jobs asking for an accelerator
    accelerator_max_units: int = 8  # "small": at most this many units
    # (resource type, most per unit) of the system's accelerators; rule_for_system fills it
    accelerators: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        if self.cores_per_node < 1:
            raise ValueError("cores_per_node must be >= 1")
        if self.mode not in UNIT_MODES:
            raise ValueError(f"unknown unit mode {self.mode!r}; one of {UNIT_MODES}")
        if not (math.isfinite(self.proc_scale) and self.proc_scale > 0):
            raise ValueError(f"proc_scale must be > 0, not {self.proc_scale}")
        if not 0.0 <= self.accelerator_share <= 1.0:
            raise ValueError(f"accelerator_share must be in [0, 1], not {self.accelerator_share}")
        if self.accelerator_share > 0 and not self.accelerators:
            raise ValueError("accelerator_share > 0 needs a system with accelerators "
                             "(a resource type other than core and mem)")

    def split(self, procs: int) -> tuple[int, int]:
        """(units, cores per unit) for a job of `procs` processors (> 0)."""
        if procs <= 0:
            raise ValueError("a job needs at least one processor")
        c = self.cores_per_node
        if self.mode == "core":
            return procs, 1
        if self.mode == "exclusive":
            return math.ceil(procs / c), c
        if procs <= c:
            return 1, procs
        units = math.ceil(procs / c)
        return units, math.ceil(procs / units)

    def request(self, job: TraceJob, system_types: frozenset[str]) -> tuple[int, dict[str, int]]:
        """(rn_i, per-unit request) of a trace job on a system with these resource types."""
        # (the epsilon keeps float noise, 25 × 0.28 = 7.000000000000001, from adding a core)
        units, cores = self.split(max(1, math.ceil(job.width * self.proc_scale - 1e-9)))
        request = {CORE: cores}
        if self.with_memory and MEM in system_types and job.requested_memory_kb > 0:
            # requested memory is per trace processor
            request[MEM] = max(1, math.ceil(job.requested_memory_kb * cores
                                            / self.proc_scale / 1024))
        accelerator = self.accelerator_for(job.id, units)
        if accelerator is not None and accelerator[0] in system_types:
            request[accelerator[0]] = accelerator[1]
        return units, request

    def accelerator_for(self, job_id: str, units: int) -> tuple[str, int] | None:
        """(type, amount per unit) a job of `units` units asks for, or None (hash of its id)."""
        if not self.accelerators or units > self.accelerator_max_units:
            return None
        digest = zlib.crc32(job_id.encode())
        if digest % 1000 >= self.accelerator_share * 1000:
            return None
        kind, most = self.accelerators[(digest >> 10) % len(self.accelerators)]
        return kind, 1 + (digest >> 11) % min(2, most)


def rule_for_system(
    system: System, mode: UnitMode = "node", proc_scale: float = 1.0,
    accelerator_share: float = 0.0,
) -> UnitRule:
    """A unit rule sized by the smallest node's cores, so every unit fits any node; the
    system's accelerator types (and the most any node has) go in for `accelerator_share`."""
    cores = [g.capacity.get(CORE, 0) for g in system.groups]
    cores = [c for c in cores if c > 0]
    if not cores:
        raise ValueError(f"system {system.name!r} has no {CORE!r} resource")
    most: dict[str, int] = {}
    for group in system.groups:
        if group.capacity.get(CORE, 0) <= 0:
            continue  # a unit needs cores: accelerators of core-less nodes are unusable
        for kind, amount in group.capacity.items():
            if kind not in (CORE, MEM):
                most[kind] = max(most.get(kind, 0), amount)
    return UnitRule(cores_per_node=min(cores), mode=mode, proc_scale=proc_scale,
                    accelerator_share=accelerator_share,
                    accelerators=tuple(sorted(most.items())) if accelerator_share > 0 else ())


def system_from_header(
    header: SwfHeader, name: str = "trace", cores_per_node: int | None = None,
    max_nodes: int = MAX_NODES,
) -> System:
    """Nodes of a given core count from MaxNodes / MaxProcs (see the module docstring);
    SwfFormatError, naming the header line, for a system beyond `max_nodes` nodes or
    MAX_FIELD_VALUE cores per node."""
    nodes = header.max_nodes if header.max_nodes and header.max_nodes > 0 else None
    procs = header.max_procs if header.max_procs and header.max_procs > 0 else None
    if nodes is None and procs is None:
        raise ValueError(
            "the trace header gives neither MaxNodes nor MaxProcs; describe the system "
            "with --system (a preset, a YAML / JSON file or NODESxCORES)"
        )
    # (nodes, cores per node, the header key the node count comes from)
    if cores_per_node is not None:
        if cores_per_node < 1:
            raise ValueError("cores_per_node must be >= 1")
        total = procs if procs is not None else nodes
        assert total is not None
        count, cores = math.ceil(total / cores_per_node), cores_per_node
        key = "MaxProcs" if procs is not None else "MaxNodes"
    elif nodes is not None and procs is not None:
        count, cores, key = nodes, max(1, math.ceil(procs / nodes)), "MaxNodes"
    elif procs is not None:
        count, cores, key = procs, 1, "MaxProcs"
    else:
        assert nodes is not None
        count, cores, key = nodes, 1, "MaxNodes"
    path = header.path or "trace header"
    if count > max_nodes:
        raise SwfFormatError(path, header.key_lines.get(key, 0),
                             f"header {key}: {header.get(key)} makes {count:,} nodes, more "
                             f"than a replay builds ({max_nodes:,}; {TOO_MANY_NODES_HINT}, "
                             "or give --system)")
    if cores > MAX_FIELD_VALUE:
        raise SwfFormatError(path, header.key_lines.get("MaxProcs", 0),
                             f"header MaxProcs: {header.get('MaxProcs')} makes {cores:,} "
                             f"processors per node, beyond {MAX_FIELD_VALUE:,}")
    return homogeneous(name, count, {CORE: cores})


def resolve_system(spec: str | None, header: SwfHeader, name: str = "trace",
                   max_nodes: int = MAX_NODES) -> System:
    """`spec` = None (from the header), a preset name, a YAML / JSON path, or NODESxCORES;
    ValueError for a system of more than `max_nodes` nodes (before any node is made)."""
    if spec is None:
        return system_from_header(header, name, max_nodes=max_nodes)
    match = _SHORT_SYSTEM.match(spec)
    if match:
        count, cores = int(match.group(1)), int(match.group(2))
        if count < 1 or cores < 1:
            raise ValueError(f"system {spec!r}: nodes and cores must be >= 1")
        if cores > MAX_FIELD_VALUE:
            raise ValueError(f"system {spec!r}: more than {MAX_FIELD_VALUE:,} cores per node")
        system = homogeneous(f"{count}x{cores}", count, {CORE: cores})
    else:
        system = load_system(spec, forms="a YAML / JSON file, or NODESxCORES such as 256x4")
    if system.node_count > max_nodes:
        raise ValueError(f"system {spec!r}: {system.node_count:,} nodes, more than a replay "
                         f"builds ({max_nodes:,}; {TOO_MANY_NODES_HINT})")
    return system


def units_fitting(kinds: Iterable[tuple[Mapping[str, int], int]],
                  request: Mapping[str, int]) -> int:
    """How many units of `request` idle nodes hold (one unit never spans nodes): `kinds`, each
    node capacity with how many nodes have it."""
    return sum(count * min((capacity.get(r, 0) // amount for r, amount in request.items()
                            if amount > 0), default=0) for capacity, count in kinds)


def units_fitting_empty(system: System, request: Mapping[str, int]) -> int:
    """How many units of `request` the whole idle system holds (one unit never spans nodes)."""
    total = 0
    for group in system.groups:
        per_node = min(
            (group.capacity.get(r, 0) // amount for r, amount in request.items() if amount > 0),
            default=0,
        )
        total += per_node * group.count
    return total
