"""System descriptions: node groups with capacities per resource type, and the papers' presets.

A system is a list of node groups; YAML / JSON files use the same shape (docs/replays.md,
*System files*; the keys: SYSTEM_KEYS, GROUP_KEYS):

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


# A system file's keys, where they stand: key -> (what its value is, required). A new key
# (issue #50: partitions, features, windows) is a row here and a line where it is read.
SYSTEM_KEYS: dict[str, tuple[str, bool]] = {
    "name": ("the system's name, default custom", False),
    "groups": ("a list of node groups", True),
}
GROUP_KEYS: dict[str, tuple[str, bool]] = {
    "prefix": ("the nodes' name prefix (gpu: gpu01, gpu02, ...)", True),
    "count": ("the number of nodes, a whole number > 0", True),
    "capacity": ("each node's amount per resource type, e.g. {core: 16, mem: 16384}", True),
}
FORMAT_HINT = "docs/replays.md, *System files*"

Place = tuple[str | int, ...]  # where a value stands in the file: its keys and list indices


class _Where:
    """Each value's line in the file (1-based), by its place; "" where it is not known."""

    def __init__(self, source: str, lines: Mapping[Place, int]) -> None:
        self.source = source
        self.lines = lines

    def error(self, place: Place, problem: str) -> ValueError:
        while place and place not in self.lines:
            place = place[:-1]
        line = self.lines.get(place)
        return ValueError(f"{self.source}{f', line {line}' if line else ''}: {problem}")


def _lines_of(text: str) -> dict[Place, int]:
    """The line of each key and list item of a YAML (or JSON) text, by its place."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    lines: dict[Place, int] = {}

    def walk(node: yaml.Node, place: Place) -> None:
        lines.setdefault(place, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                lines[(*place, str(key.value))] = key.start_mark.line + 1
                walk(value, (*place, str(key.value)))
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                walk(item, (*place, index))

    if root is not None:
        walk(root, ())
    return lines


def _mapping(data: Any, place: Place, keys: Mapping[str, tuple[str, bool]], what: str,
             where: _Where) -> Mapping[str, Any]:
    """`data` as a mapping of `keys`: every required key there, no other key."""
    expected = "; ".join(f"{key} ({'' if required else 'optional: '}{meaning})"
                         for key, (meaning, required) in keys.items())
    if not isinstance(data, Mapping):
        raise where.error(place, f"{what} must be a mapping of the keys {expected}; found "
                          f"{_shown(data)} ({FORMAT_HINT})")
    for key in data:
        if str(key) not in keys:
            raise where.error((*place, str(key)), f"unknown key {str(key)!r} in {what}; its "
                              f"keys are {expected} ({FORMAT_HINT})")
    for key, (meaning, required) in keys.items():
        if required and key not in data:
            raise where.error(place, f"{what} has no {key!r}: {meaning} ({FORMAT_HINT})")
    return data


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _positive(value: Any, place: Place, what: str, where: _Where) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise where.error(place, f"{what} must be a whole number > 0, not {_shown(value)}")
    return value


def _group(data: Any, place: Place, where: _Where) -> NodeGroup:
    what = f"node group {int(place[-1]) + 1}"
    group = _mapping(data, place, GROUP_KEYS, what, where)
    prefix = group["prefix"]
    if not isinstance(prefix, str | int) or isinstance(prefix, bool) or not str(prefix):
        raise where.error((*place, "prefix"), f"{what}: 'prefix' must be a text, not "
                          f"{_shown(prefix)}")
    count = _positive(group["count"], (*place, "count"), f"{what}: 'count'", where)
    capacity = group["capacity"]
    if not isinstance(capacity, Mapping) or not capacity:
        raise where.error((*place, "capacity"), f"{what}: 'capacity' must map one or more "
                          f"resource types to amounts, e.g. {{core: 16}}; found "
                          f"{_shown(capacity)}")
    amounts = {str(kind): _positive(amount, (*place, "capacity", str(kind)),
                                    f"{what}: capacity {str(kind)!r}", where)
               for kind, amount in capacity.items()}
    return NodeGroup(str(prefix), count, amounts)


def system_from_dict(data: Any, source: str = "system description",
                     lines: Mapping[Place, int] | None = None) -> System:
    """The system `data` describes (module docstring); ValueError naming `source`, the line
    (`lines`: each value's line, by its place) and the key expected, where it is not one."""
    where = _Where(source, lines or {})
    top = _mapping(data, (), SYSTEM_KEYS, "the file", where)
    groups = top["groups"]
    if not isinstance(groups, list) or not groups:
        raise where.error(("groups",), f"'groups' must be a list of one or more node groups, "
                          f"each a mapping with {', '.join(GROUP_KEYS)}; found "
                          f"{_shown(groups)} ({FORMAT_HINT})")
    return System(str(top.get("name", "custom")),
                  tuple(_group(g, ("groups", i), where) for i, g in enumerate(groups)))


def load_system(spec: str, forms: str = "the path of a YAML / JSON system description") -> System:
    """A preset name, or a path to a YAML / JSON system description. ValueError, naming the
    presets and the other `forms` a caller accepts, for anything else; for a file that is not
    a system description, naming the file, the line and the key expected."""
    if spec in PRESETS:
        return PRESETS[spec]
    path = Path(spec)
    if not path.is_file():
        raise ValueError(f"system {spec!r}: no such preset or file; give a preset "
                         f"({', '.join(sorted(PRESETS))}) or {forms}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"system {spec}: cannot read it as text: {exc}") from None
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"system {spec}, line {exc.lineno}, column {exc.colno}: not a JSON "
                         f"file: {exc.msg}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ValueError(f"system {spec}{at}: not a YAML file: {problem}") from None
    return system_from_dict(data, f"system {spec}", _lines_of(text))


def homogeneous(name: str, nodes: int, capacity: Mapping[str, int]) -> System:
    return System(name, (NodeGroup("n", nodes, dict(capacity)),))
