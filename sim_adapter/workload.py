"""From SWF processors to job units rn_i, and from a trace header to a system.

SWF records only a processor count per job. How those processors become the identical units
of DESIGN.md §1 is a rule (`UnitRule`), chosen per replay:

- ``node`` (default): a job that fits in one node is one unit of its processors; a wider job
  becomes ceil(procs / cores_per_node) units of ceil(procs / units) cores each, i.e. units of
  at most a whole node. A job of 9,216 processors on 8-core nodes is 1,152 units, not 9,216,
  which keeps the CP models small for wide jobs. The rounding adds fewer than `units` cores.
- ``exclusive``: every job gets whole nodes: ceil(procs / cores_per_node) units of
  cores_per_node cores (no node sharing).
- ``core``: one unit of one core per processor (exact but large; AccaSim's convention).

Cores are the resource type ``core``. When the system also has ``mem`` and the record has a
requested memory (KB per processor), each unit also asks for its share in MiB.

A system comes from a preset (`hpcdispatch.systems.PRESETS`), a YAML / JSON file, the short
form ``NODESxCORES`` (e.g. ``256x1``), or the trace header: MaxNodes nodes of
MaxProcs / MaxNodes cores (LLNL-Atlas: 1,152 x 8), or single-core nodes when only one of
MaxProcs / MaxNodes is given (KTH-SP2: 100 x 1, lublin_256: 256 x 1).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from hpcdispatch.sim_adapter.swf import SwfHeader, TraceJob
from hpcdispatch.systems import System, homogeneous, load_system

UnitMode = Literal["node", "exclusive", "core"]
UNIT_MODES: tuple[str, ...] = ("node", "exclusive", "core")
CORE = "core"
MEM = "mem"
_SHORT_SYSTEM = re.compile(r"^(\d+)x(\d+)$")


@dataclass(frozen=True, slots=True)
class UnitRule:
    """How a job's processors become rn_i identical units (see the module docstring)."""

    cores_per_node: int = 1
    mode: UnitMode = "node"
    with_memory: bool = True  # ask for memory when the system has "mem" and the trace says

    def __post_init__(self) -> None:
        if self.cores_per_node < 1:
            raise ValueError("cores_per_node must be >= 1")
        if self.mode not in UNIT_MODES:
            raise ValueError(f"unknown unit mode {self.mode!r}; one of {UNIT_MODES}")

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
        units, cores = self.split(job.width)
        request = {CORE: cores}
        if self.with_memory and MEM in system_types and job.requested_memory_kb > 0:
            request[MEM] = max(1, math.ceil(job.requested_memory_kb * cores / 1024))
        return units, request


def rule_for_system(system: System, mode: UnitMode = "node") -> UnitRule:
    """A unit rule sized by the smallest node's cores, so every unit fits any node."""
    cores = [g.capacity.get(CORE, 0) for g in system.groups]
    cores = [c for c in cores if c > 0]
    if not cores:
        raise ValueError(f"system {system.name!r} has no {CORE!r} resource")
    return UnitRule(cores_per_node=min(cores), mode=mode)


def system_from_header(
    header: SwfHeader, name: str = "trace", cores_per_node: int | None = None
) -> System:
    """Nodes of a given core count from MaxNodes / MaxProcs (see the module docstring)."""
    nodes = header.max_nodes if header.max_nodes and header.max_nodes > 0 else None
    procs = header.max_procs if header.max_procs and header.max_procs > 0 else None
    if nodes is None and procs is None:
        raise ValueError(
            "the trace header gives neither MaxNodes nor MaxProcs; describe the system "
            "with --system (a preset, a YAML / JSON file or NODESxCORES)"
        )
    if cores_per_node is not None:
        if cores_per_node < 1:
            raise ValueError("cores_per_node must be >= 1")
        total = procs if procs is not None else nodes
        assert total is not None
        return homogeneous(name, math.ceil(total / cores_per_node), {CORE: cores_per_node})
    if nodes is not None and procs is not None:
        return homogeneous(name, nodes, {CORE: max(1, math.ceil(procs / nodes))})
    count = procs if procs is not None else nodes
    assert count is not None
    return homogeneous(name, count, {CORE: 1})


def resolve_system(spec: str | None, header: SwfHeader, name: str = "trace") -> System:
    """`spec` = None (from the header), a preset name, a YAML / JSON path, or NODESxCORES."""
    if spec is None:
        return system_from_header(header, name)
    match = _SHORT_SYSTEM.match(spec)
    if match:
        count, cores = int(match.group(1)), int(match.group(2))
        if count < 1 or cores < 1:
            raise ValueError(f"system {spec!r}: nodes and cores must be >= 1")
        return homogeneous(f"{count}x{cores}", count, {CORE: cores})
    return load_system(spec)


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
