"""The resource mapping between a Slurm job and hpcdispatch units (documented in
docs/slurm-bridge.md, *Resource mapping*).

Rule:
* A job without --ntasks-per-node is `tasks` units of `cpus_per_task` cores each ("core" is a
  Slurm CPU). The dispatcher may put several units on one node; the bridge applies the
  decision as NodeList = the distinct nodes, NumNodes = their count, and Slurm lays the tasks
  out over exactly those nodes.
* A job with --ntasks-per-node=k is `node_count` units of `k * cpus_per_task` cores: one unit
  per node. Slurm needs distinct nodes for it, so a decision that stacks two of its units on one
  node cannot be applied and the job stays held for the next cycle.
* Memory ("mem", MiB) when tracked: --mem-per-cpu gives `memory_per_cpu * cores` per unit;
  --mem (per node) gives the whole per-node amount per unit (safe: a unit alone on a node
  needs all of it); --mem=0 means a whole node's memory.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .slurm_json import SlurmJob

CORE = "core"
MEM = "mem"


class UnplaceableError(ValueError):
    """A decision that Slurm cannot express for this job."""


@dataclass(frozen=True, slots=True)
class UnitShape:
    units: int
    per_unit: dict[str, int]
    one_per_node: bool  # units are per-node shares: they need distinct nodes


@dataclass(frozen=True, slots=True)
class Placement:
    nodes: tuple[str, ...]  # distinct, sorted
    num_nodes: int

    @property
    def node_list(self) -> str:
        return ",".join(self.nodes)


def unit_shape(job: SlurmJob, track_memory: bool, node_memory: int) -> UnitShape:
    """Units and per-unit request of a pending job. node_memory: the largest node's MiB."""
    if job.tasks_per_node > 0:
        units = job.node_count
        cores = job.tasks_per_node * job.cpus_per_task
    else:
        units = job.tasks if job.tasks > 0 else max(1, job.cpus // job.cpus_per_task)
        cores = job.cpus_per_task
    per_unit = {CORE: max(1, cores)}
    if track_memory:
        if job.memory_per_cpu is not None:
            mem = job.memory_per_cpu * cores
        elif job.memory_per_node is not None:
            mem = job.memory_per_node or node_memory
        else:
            mem = 0
        if mem > 0:
            per_unit[MEM] = mem
    return UnitShape(units=max(1, units), per_unit=per_unit,
                     one_per_node=job.tasks_per_node > 0)


def natural_key(name: str) -> list[int | str]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]


def placement_for(shape: UnitShape, unit_nodes: Sequence[str]) -> Placement:
    """How to pin a job to the nodes of its units (one node name per unit)."""
    if len(unit_nodes) != shape.units:
        raise UnplaceableError(f"{len(unit_nodes)} units placed, job has {shape.units}")
    distinct = tuple(sorted(set(unit_nodes), key=natural_key))
    if shape.one_per_node and len(distinct) != len(unit_nodes):
        raise UnplaceableError("units of a --ntasks-per-node job stacked on one node")
    return Placement(nodes=distinct, num_nodes=len(distinct))
