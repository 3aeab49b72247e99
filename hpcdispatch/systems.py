"""System descriptions: node groups with capacities per resource type, and the papers' presets.

A system is a list of node groups; YAML / JSON files use the same shape:

    name: eurora
    groups:
      - {prefix: gpu, count: 32, capacity: {core: 16, mem: 16384, gpu: 2}}
      - {prefix: mic, count: 32, capacity: {core: 16, mem: 16384, mic: 2}}
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from hpcdispatch.snapshot import Node, NodeState


@dataclass(frozen=True, slots=True)
class NodeGroup:
    prefix: str
    count: int
    capacity: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class System:
    name: str
    groups: tuple[NodeGroup, ...]

    def nodes(self) -> tuple[Node, ...]:
        out: list[Node] = []
        for g in self.groups:
            width = len(str(g.count))
            out.extend(
                Node(f"{g.prefix}{i:0{width}d}", NodeState.UP, dict(g.capacity))
                for i in range(1, g.count + 1)
            )
        return tuple(out)

    @property
    def node_count(self) -> int:
        return sum(g.count for g in self.groups)


PRESETS: dict[str, System] = {
    # KIT ForHLR II: 1,152 thin nodes (20 cores, 64 GB) + 21 fat nodes (48 cores, 4 GPUs, 1 TB).
    "kit-forhlr2": System(
        "kit-forhlr2",
        (
            NodeGroup("thin", 1152, {"core": 20, "mem": 64 * 1024}),
            NodeGroup("fat", 21, {"core": 48, "mem": 1024 * 1024, "gpu": 4}),
        ),
    ),
    # Eurora: 64 nodes × (2 × 8 cores, 16 GB); 32 with 2 GPUs, 32 with 2 MICs.
    "eurora": System(
        "eurora",
        (
            NodeGroup("gpu", 32, {"core": 16, "mem": 16 * 1024, "gpu": 2}),
            NodeGroup("mic", 32, {"core": 16, "mem": 16 * 1024, "mic": 2}),
        ),
    ),
}


def system_from_dict(data: Mapping[str, Any]) -> System:
    try:
        groups = tuple(
            NodeGroup(str(g["prefix"]), int(g["count"]), {str(k): int(v) for k, v in
                                                          g["capacity"].items()})
            for g in data["groups"]
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"invalid system description: {exc!r}") from exc
    for g in groups:
        if g.count <= 0 or not g.capacity or any(v <= 0 for v in g.capacity.values()):
            raise ValueError(f"node group {g.prefix!r}: count and capacities must be > 0")
    return System(str(data.get("name", "custom")), groups)


def load_system(spec: str, forms: str = "the path of a YAML / JSON system description") -> System:
    """A preset name, or a path to a YAML / JSON system description. ValueError, naming the
    presets and the other `forms` a caller accepts, for anything else."""
    if spec in PRESETS:
        return PRESETS[spec]
    path = Path(spec)
    if not path.is_file():
        raise ValueError(f"system {spec!r}: no such preset or file; give a preset "
                         f"({', '.join(sorted(PRESETS))}) or {forms}")
    text = path.read_text(encoding="utf-8")
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"system {spec}: not a {'JSON' if path.suffix == '.json' else 'YAML'} "
                         f"file: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, Mapping):
        raise ValueError(f"system {spec}: expected a mapping with 'groups', as in "
                         "hpcdispatch/systems.py's docstring")
    return system_from_dict(data)


def homogeneous(name: str, nodes: int, capacity: Mapping[str, int]) -> System:
    return System(name, (NodeGroup("n", nodes, dict(capacity)),))
