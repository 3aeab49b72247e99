"""System descriptions: node groups with capacities per resource type, a site's rules
(partitions, node features, unavailability windows, what a trace's SWF partition and queue
numbers mean), and the presets.

A system is a list of node groups; YAML / JSON files use the same shape (docs/replays.md,
*System files*; the keys: SYSTEM_KEYS, GROUP_KEYS, WINDOW_KEYS):

    name: eurora
    groups:
      - {prefix: gpu, count: 32, capacity: {core: 16, mem: 16384, gpu: 2}}
      - {prefix: mic, count: 32, capacity: {core: 16, mem: 16384, mic: 2}}
    partitions: {gpu: "gpu[01-32]", mic: "mic[01-32]"}
    features: {fast: "gpu[01-16]", big: "gpu[09-32]"}
    partition_features: {gpu: "fast|big"}
    windows:
      - {nodes: [gpu], every: week, at: "tue 06:00", for: 4h}

The presets are PRESETS (written here) and the system files of hpcdispatch/presets/ (by their
name without .yaml).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from hpcdispatch.constraints import NO_FEATURES, FeatureRules, both, constraint_rules
from hpcdispatch.site_calendar import PERIODS, WindowRule, parse_at, parse_duration
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
    # A site's rules (docs/replays.md, *System files*), none by default.
    partitions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # name -> node ids
    features: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # feature -> node ids
    windows: tuple[WindowRule, ...] = ()
    swf_partitions: Mapping[int, str] = field(default_factory=dict)  # SWF field 16 -> name
    swf_queue_priority: Mapping[int, int] = field(default_factory=dict)  # SWF field 15 -> prio
    default_partition: str = ""  # of a job whose SWF partition is unknown (-1); "": any node
    # The node features the jobs of a partition, of an SWF queue (field 15) require, as
    # (required, alternatives) (hpcdispatch/constraints.py).
    partition_features: Mapping[str, FeatureRules] = field(default_factory=dict)
    swf_queue_features: Mapping[int, FeatureRules] = field(default_factory=dict)
    # The priority the jobs of a partition get (Slurm's partition PriorityTier / job factor),
    # added to their SWF queue's.
    partition_priority: Mapping[str, int] = field(default_factory=dict)
    # The priority a user's jobs get (a QOS or an account's share), by the user's name in the
    # replay (SWF field 12 n is "un"), added too.
    user_priority: Mapping[str, int] = field(default_factory=dict)

    def job_priority(self, partitions: tuple[str, ...], swf_queue: int, user: str = "") -> int:
        """The priority a job of `partitions`, SWF queue `swf_queue` and `user` is sent: its
        queue's (`swf_queue_priority`), plus its partitions' highest (`partition_priority`),
        plus its user's (`user_priority`); 0 where none is given."""
        tiers = [self.partition_priority[p] for p in partitions if p in self.partition_priority]
        return (self.swf_queue_priority.get(swf_queue, 0) + (max(tiers) if tiers else 0)
                + self.user_priority.get(user, 0))

    def job_features(self, partitions: tuple[str, ...], swf_queue: int) -> FeatureRules:
        """The features a job of `partitions` (its one partition, in a replay) and of SWF
        queue `swf_queue` requires: its partition's and its queue's together."""
        rules = self.swf_queue_features.get(swf_queue, NO_FEATURES)
        for partition in partitions:
            rules = both(rules, self.partition_features.get(partition, NO_FEATURES))
        return rules

    def node_ids(self) -> tuple[str, ...]:
        """The nodes' names, group by group: prefix and a number padded to the count's width."""
        out: list[str] = []
        for g in self.groups:
            width = len(str(g.count))
            out.extend(f"{g.prefix}{i:0{width}d}" for i in range(1, g.count + 1))
        return tuple(out)

    def nodes(self) -> tuple[Node, ...]:
        capacities = [g.capacity for g in self.groups for _ in range(g.count)]
        labels: dict[str, tuple[list[str], list[str]]] = {}
        for kind, named in ((0, self.partitions), (1, self.features)):
            for label, node_ids in named.items():
                for node_id in node_ids:
                    labels.setdefault(node_id, ([], []))[kind].append(label)
        none: tuple[list[str], list[str]] = ([], [])
        return tuple(
            Node(node_id, NodeState.UP, dict(capacity),
                 *(tuple(x) for x in labels.get(node_id, none)))
            for node_id, capacity in zip(self.node_ids(), capacities, strict=True))

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


# A system file's keys, where they stand: key -> (what its value is, required). A new key is
# a row here and a line where it is read.
NODES_FORM = "node names, ranges such as thin[0001-0512], or partition names; one or a list"
CONSTRAINT_FORM = ('a feature, a list of features (all of them), or a constraint as Slurm\'s '
                   '--constraint writes it: "a&b" (all), "a|b" (one of them), read left to '
                   'right')
SYSTEM_KEYS: dict[str, tuple[str, bool]] = {
    "name": ("the system's name, default custom", False),
    "groups": ("a list of node groups", True),
    "partitions": ("a mapping of partition names to their nodes: node names or ranges such "
                   "as thin[0001-0512], one or a list", False),
    "features": (f"a mapping of node features to their nodes: {NODES_FORM}", False),
    "windows": ("a list of unavailability windows (maintenance, reservations)", False),
    "swf_partitions": ("a mapping of the trace's SWF partition numbers (field 16) to "
                       "partition names", False),
    "swf_queue_priority": ("a mapping of the trace's SWF queue numbers (field 15) to job "
                           "priorities, higher first", False),
    "default_partition": ("the partition of a job whose SWF partition is unknown (-1)", False),
    "partition_priority": ("a mapping of partition names to the priority their jobs get "
                           "(a whole number, added to their SWF queue's), higher first", False),
    "user_priority": ("a mapping of user names (SWF field 12 n is un) to the priority their "
                      "jobs get (a whole number, added), higher first", False),
    "partition_features": ("a mapping of partition names to the node features their jobs "
                           f"require: {CONSTRAINT_FORM}", False),
    "swf_queue_features": ("a mapping of the trace's SWF queue numbers (field 15) to the node "
                           f"features their jobs require: {CONSTRAINT_FORM}", False),
}
WINDOW_KEYS: dict[str, tuple[str, bool]] = {
    "name": ("what the window is, for the reader", False),
    "nodes": (f"the nodes it covers: {NODES_FORM}; default every node", False),
    "from": ("a one-off window's start, seconds of the trace's clock (or 3d 6h)", False),
    "to": ("a one-off window's end, as from", False),
    "every": (f"a recurring window's period: {' or '.join(PERIODS)}", False),
    "at": ('when each recurring window begins, in the trace\'s time zone: "tue 06:00" '
           '(weekly), "06:00" (daily)', False),
    "for": ("its length: 4h, 90m, 1d, or seconds", False),
    "users": ("the users it admits (a reservation); default nobody", False),
    "accounts": ("the accounts it admits; default nobody", False),
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
    system = System(str(top.get("name", "custom")),
                    tuple(_group(g, ("groups", i), where) for i, g in enumerate(groups)))
    return _site_rules(system, top, where)


_RANGE = re.compile(r"^([^\[\]]*)\[([0-9,\-]+)\]([^\[\]]*)$")


def _expanded(text: str) -> list[str] | None:
    """The node names of a range such as thin[0001-0512,0600] (None: not a range)."""
    match = _RANGE.match(text)
    if match is None:
        return None
    prefix, parts, suffix = match.groups()
    names: list[str] = []
    for part in parts.split(","):
        first, _, last = part.partition("-")
        if not first.isdigit() or not (last or first).isdigit() or int(last or first) < int(first):
            return None
        names.extend(f"{prefix}{i:0{len(first)}d}{suffix}"
                     for i in range(int(first), int(last or first) + 1))
    return names


def _node_list(value: Any, place: Place, what: str, where: _Where, known: Mapping[str, int],
               partitions: Mapping[str, tuple[str, ...]]) -> tuple[str, ...]:
    """The node ids `value` names (NODES_FORM), each once, in the system's order."""
    items = value if isinstance(value, list) else [value]
    chosen: set[str] = set()
    for index, item in enumerate(items):
        at = (*place, index) if isinstance(value, list) else place
        if not isinstance(item, str) or not item:
            raise where.error(at, f"{what} must be {NODES_FORM}; found {_shown(item)}")
        names = partitions.get(item) or _expanded(item) or [item]
        unknown = [n for n in names if n not in known]
        if unknown:
            ids = list(known)
            first, last = ids[0], ids[-1]
            raise where.error(at, f"{what}: {unknown[0]!r} is no node of the system (its "
                              f"nodes: {first} .. {last}"
                              f"{', partitions: ' + ', '.join(partitions) if partitions else ''})")
        chosen.update(names)
    if not chosen:
        raise where.error(place, f"{what} names no node; give {NODES_FORM}")
    return tuple(sorted(chosen, key=known.__getitem__))


def _names(value: Any, place: Place, what: str, where: _Where) -> tuple[str, ...]:
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(v, str | int) and not isinstance(v, bool) and str(v) for v in items):
        raise where.error(place, f"{what} must be a name or a list of names; found "
                          f"{_shown(value)}")
    return tuple(str(v) for v in items)


def _labelled(data: Any, key: str, where: _Where, known: Mapping[str, int],
              partitions: Mapping[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    _check_mapping(data, key, where, empty=False)
    return {str(label): _node_list(nodes, (key, str(label)), f"{key} {str(label)!r}", where,
                                   known, partitions)
            for label, nodes in data.items()}


def _check_mapping(data: Any, key: str, where: _Where, empty: bool = True) -> None:
    """A top-level key's value is a mapping (a non-empty one unless `empty`), else the error
    naming the key, what its value is, and the line."""
    if not isinstance(data, Mapping) or (not empty and not data):
        raise where.error((key,), f"{key!r} must be {SYSTEM_KEYS[key][0]}; found "
                          f"{_shown(data)} ({FORMAT_HINT})")


def _number_map(data: Any, key: str, where: _Where, value: str,
                partitions: Mapping[str, tuple[str, ...]]) -> dict[int, Any]:
    _check_mapping(data, key, where)
    out: dict[int, Any] = {}
    for number, target in data.items():
        place = (key, str(number))
        if isinstance(number, bool) or not isinstance(number, int) or number < 0:
            raise where.error(place, f"{key}: {_shown(number)} is not an SWF number (a whole "
                              f"number >= 0)")
        if value == "partition":
            if str(target) not in partitions:
                raise where.error(place, f"{key}: SWF partition {number} maps to "
                                  f"{_shown(target)}, which is no partition of 'partitions' "
                                  f"({', '.join(partitions) or 'none given'})")
            out[number] = str(target)
        else:
            if isinstance(target, bool) or not isinstance(target, int):
                raise where.error(place, f"{key}: the priority of SWF queue {number} must be "
                                  f"a whole number, not {_shown(target)}")
            out[number] = target
    return out


def _window(data: Any, place: Place, where: _Where, known: Mapping[str, int],
            partitions: Mapping[str, tuple[str, ...]]) -> WindowRule:
    what = f"window {int(place[-1]) + 1}"
    w = _mapping(data, place, WINDOW_KEYS, what, where)
    nodes = (_node_list(w["nodes"], (*place, "nodes"), f"{what}: 'nodes'", where, known,
                        partitions) if "nodes" in w else tuple(known))
    users = _names(w["users"], (*place, "users"), f"{what}: 'users'", where) \
        if "users" in w else ()
    accounts = _names(w["accounts"], (*place, "accounts"), f"{what}: 'accounts'", where) \
        if "accounts" in w else ()

    def seconds(key: str) -> int:
        try:
            return parse_duration(w[key])
        except ValueError as exc:
            raise where.error((*place, key), f"{what}: {key!r}: {exc}") from None

    if "every" in w:
        stray = [k for k in ("from", "to") if k in w]
        if stray:
            raise where.error((*place, stray[0]), f"{what}: a recurring window ('every') has "
                              f"'at' and 'for', not {stray[0]!r} ({FORMAT_HINT})")
        period = PERIODS.get(str(w["every"]))
        if period is None:
            raise where.error((*place, "every"), f"{what}: 'every' is "
                              f"{' or '.join(PERIODS)}, not {_shown(w['every'])}")
        for key in ("at", "for"):
            if key not in w:
                raise where.error(place, f"{what} has no {key!r}: {WINDOW_KEYS[key][0]} "
                                  f"({FORMAT_HINT})")
        try:
            offset = parse_at(w["at"], period)
        except ValueError as exc:
            raise where.error((*place, "at"), f"{what}: {exc}") from None
        length = seconds("for")
        if not 0 < length < period:
            raise where.error((*place, "for"), f"{what}: 'for' must be more than 0 and less "
                              f"than its period ({period} s), not {length} s")
        return WindowRule(nodes, offset, length, period, users, accounts,
                          str(w.get("name", "")))
    if "from" not in w:
        raise where.error(place, f"{what} has neither 'from' (a one-off window: from, and to "
                          f"or for) nor 'every' (a recurring one: every, at, for) "
                          f"({FORMAT_HINT})")
    if ("to" in w) == ("for" in w):
        raise where.error(place, f"{what}: a one-off window has 'from' and one of 'to' "
                          f"({WINDOW_KEYS['to'][0]}) or 'for' ({WINDOW_KEYS['for'][0]})")
    start = seconds("from")
    length = seconds("to") - start if "to" in w else seconds("for")
    if length <= 0:
        raise where.error((*place, "to" if "to" in w else "for"), f"{what} ends before it "
                          f"begins: [{start}, {start + length})")
    return WindowRule(nodes, start, length, 0, users, accounts, str(w.get("name", "")))


def _site_rules(system: System, top: Mapping[str, Any], where: _Where) -> System:
    """`system` with the file's partitions, features, windows and SWF numbers."""
    if not any(k in top for k in ("partitions", "features", "windows", "swf_partitions",
                                  "swf_queue_priority", "default_partition",
                                  "partition_features", "swf_queue_features",
                                  "partition_priority", "user_priority")):
        return system
    known = {n: i for i, n in enumerate(system.node_ids())}
    partitions = _labelled(top["partitions"], "partitions", where, known, {}) \
        if "partitions" in top else {}
    features = _labelled(top["features"], "features", where, known, partitions) \
        if "features" in top else {}
    windows = top.get("windows", [])
    if not isinstance(windows, list):
        raise where.error(("windows",), f"'windows' must be a list of windows, each a mapping "
                          f"of {', '.join(WINDOW_KEYS)}; found {_shown(windows)} "
                          f"({FORMAT_HINT})")
    rules = tuple(_window(w, ("windows", i), where, known, partitions)
                  for i, w in enumerate(windows))
    default = str(top.get("default_partition", ""))
    if default and default not in partitions:
        raise where.error(("default_partition",), f"'default_partition' {default!r} is no "
                          f"partition of 'partitions' ({', '.join(partitions) or 'none given'})")
    return System(
        system.name, system.groups, partitions, features, rules,
        _number_map(top["swf_partitions"], "swf_partitions", where, "partition", partitions)
        if "swf_partitions" in top else {},
        _number_map(top["swf_queue_priority"], "swf_queue_priority", where, "priority",
                    partitions) if "swf_queue_priority" in top else {},
        default,
        {str(p): rules for p, rules in _feature_map(top, "partition_features", where,
                                                    features, partitions).items()},
        {int(q): rules for q, rules in _feature_map(top, "swf_queue_features", where,
                                                    features, partitions).items()},
        _priorities(top, "partition_priority", where, partitions),
        _priorities(top, "user_priority", where, partitions))


def _priorities(top: Mapping[str, Any], key: str, where: _Where,
                partitions: Mapping[str, tuple[str, ...]]) -> dict[str, int]:
    """`partition_priority` (partition name, of 'partitions') or `user_priority` (a user's
    name) -> a whole number."""
    if key not in top:
        return {}
    data = top[key]
    _check_mapping(data, key, where)
    out: dict[str, int] = {}
    for label, value in data.items():
        place = (key, str(label))
        what = "partition" if key == "partition_priority" else "user"
        if key == "partition_priority" and str(label) not in partitions:
            raise where.error(place, f"{key}: {_shown(label)} is no partition of "
                              f"'partitions' ({', '.join(partitions) or 'none given'})")
        if isinstance(value, bool) or not isinstance(value, int):
            raise where.error(place, f"{key}: the priority of {what} {str(label)!r} must "
                              f"be a whole number, not {_shown(value)}")
        out[str(label)] = value
    return out


def _feature_map(top: Mapping[str, Any], key: str, where: _Where,
                 features: Mapping[str, tuple[str, ...]],
                 partitions: Mapping[str, tuple[str, ...]]) -> dict[str | int, FeatureRules]:
    """`partition_features` (by partition name) or `swf_queue_features` (by SWF queue
    number): each a constraint (CONSTRAINT_FORM) of the features of 'features'."""
    if key not in top:
        return {}
    data = top[key]
    _check_mapping(data, key, where, empty=False)
    out: dict[str | int, FeatureRules] = {}
    for label, value in data.items():
        place = (key, str(label))
        if key == "partition_features":
            if str(label) not in partitions:
                raise where.error(place, f"{key}: {_shown(label)} is no partition of "
                                  f"'partitions' ({', '.join(partitions) or 'none given'})")
        elif isinstance(label, bool) or not isinstance(label, int) or label < 0:
            raise where.error(place, f"{key}: {_shown(label)} is not an SWF queue number (a "
                              f"whole number >= 0)")
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            text = "&".join(value)
        elif isinstance(value, str):
            text = value
        else:
            raise where.error(place, f"{key} {str(label)!r} must be {CONSTRAINT_FORM}; found "
                              f"{_shown(value)} ({FORMAT_HINT})")
        rules = constraint_rules(text)
        if rules is None or rules == NO_FEATURES:
            raise where.error(place, f"{key} {str(label)!r}: {_shown(value)} is not "
                              f"{CONSTRAINT_FORM} ({FORMAT_HINT})")
        named = {f for term in (rules[0], *rules[1]) for f in term}
        unknown = sorted(named - set(features))
        if unknown:
            raise where.error(place, f"{key} {str(label)!r}: {unknown[0]!r} is no feature of "
                              f"'features' ({', '.join(features) or 'none given'})")
        out[label if key == "swf_queue_features" else str(label)] = rules
    return out


# The presets written as system files (a site's rules with them): name -> file.
PRESET_DIR = Path(__file__).parent / "presets"


def preset_names() -> list[str]:
    """Every preset's name: PRESETS and the system files of PRESET_DIR."""
    return sorted({*PRESETS, *(p.stem for p in PRESET_DIR.glob("*.yaml"))})


def load_system(spec: str, forms: str = "the path of a YAML / JSON system description") -> System:
    """A preset name, or a path to a YAML / JSON system description. ValueError, naming the
    presets and the other `forms` a caller accepts, for anything else; for a file that is not
    a system description, naming the file, the line and the key expected."""
    if spec in PRESETS:
        return PRESETS[spec]
    preset_file = PRESET_DIR / f"{spec}.yaml"
    path = preset_file if "/" not in spec and preset_file.is_file() else Path(spec)
    if not path.is_file():
        raise ValueError(f"system {spec!r}: no such preset or file; give a preset "
                         f"({', '.join(preset_names())}) or {forms}")
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
    return system_from_dict(data, f"system {spec if path != preset_file else path}",
                            _lines_of(text))


def homogeneous(name: str, nodes: int, capacity: Mapping[str, int]) -> System:
    return System(name, (NodeGroup("n", nodes, dict(capacity)),))
