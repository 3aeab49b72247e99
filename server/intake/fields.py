"""The rules of the fields that nodes, jobs, options and deltas share, each with its limit: a text
(an identifier, a name) within its length, and a map of resource types (a node's capacity, a
unit's request or amounts) within the types one map may name, each amount in range.

Each limit is a configuration key (server/config.py, docs/configuration.md); a field beyond one
is answered INVALID_ARGUMENT naming the field and the limit. A list of names of a site's rules
(partitions, features, a window's users and accounts) is at most `max_labels` non-empty names,
each within `max_id_chars` and named once. The `*_within` forms say the same
without saying why, for the fast paths (the node table, the running-job cache, a job whose texts
all fit): a rule and its fast form sit side by side, so one change changes both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet

from ..config import ServerConfig
from .shown import key_path, shown
from .violations import Violations

DEFAULT_LIMITS = ServerConfig()

# Bounds that keep every model's arithmetic (weights × horizon × jobs) inside 64-bit integers.
MAX_TIME = 2**40  # |t|, submit and start times, seconds
MAX_DURATION = 2**31  # requested, expected and actual durations (about 68 years), seconds
MAX_AMOUNT = 2**40  # one node's capacity or one unit's request of a resource type


def check_text(value: str, path: str, limit: int, key: str, out: Violations) -> bool:
    """A string field of at most `limit` characters (the configuration `key` names it)."""
    if len(value) <= limit:
        return True
    out.add(path, f"{len(value)} characters exceed the limit of {limit} ({key})")
    return False


def check_id(value: str, path: str, config: ServerConfig, out: Violations) -> bool:
    return check_text(value, path, config.max_id_chars, "max_id_chars", out)


def check_types(
    amounts: Mapping[str, int], path: str, config: ServerConfig, out: Violations,
) -> bool:
    """A map of resource types: at most `max_resource_types` entries, each name at most
    `max_id_chars` long."""
    if len(amounts) > config.max_resource_types:
        out.add(path, f"{len(amounts)} resource types exceed the limit of "
                f"{config.max_resource_types} (max_resource_types)")
        return False
    ok = True
    for resource in amounts:
        if len(resource) > config.max_id_chars:
            out.add(path, f"resource type {shown(resource)} is longer than the limit of "
                    f"{config.max_id_chars} characters (max_id_chars)")
            ok = False
    return ok


def types_within(amounts: Mapping[str, int], config: ServerConfig) -> bool:
    """`check_types` without saying why (the fast paths)."""
    return len(amounts) <= config.max_resource_types and all(
        len(r) <= config.max_id_chars for r in amounts)


def check_capacity_amounts(path: str, capacity: Mapping[str, int], out: Violations) -> None:
    """A node's capacity at `path`: every resource type named, every amount in (0, 2^40]."""
    for resource, amount in capacity.items():
        if not resource:
            out.add(path, "resource type names must not be empty")
        if not 0 < amount <= MAX_AMOUNT:
            out.add(key_path(path, resource), f"must be > 0 and <= 2^40, got {amount}")


def check_request(
    unit_request: Mapping[str, int], path: str, known_types: AbstractSet[str] | None,
    config: ServerConfig, out: Violations,
) -> None:
    """One unit's request (a queued or a finished job's): its types within the limits, then
    `check_unit_request`."""
    if check_types(unit_request, path, config, out):
        check_unit_request(unit_request, path, known_types, out)


def check_unit_request(
    unit_request: Mapping[str, int], path: str,
    known_types: AbstractSet[str] | None, out: Violations,
) -> None:
    """One unit's request: named resource types, each amount in (0, 2^40]; with `known_types`,
    only types some node has."""
    if not unit_request:
        out.add(path, "must request at least one resource type")
    for resource, amount in unit_request.items():
        if not 0 < amount <= MAX_AMOUNT:
            out.add(key_path(path, resource), f"must be > 0 and <= 2^40, got {amount}")
        elif not resource:
            out.add(path, "resource type names must not be empty")
        elif known_types is not None and resource not in known_types:
            out.add(key_path(path, resource), f"no node has resource type {shown(resource)}")


def check_labels(labels: Sequence[str], path: str, config: ServerConfig,
                 out: Violations) -> bool:
    """A list of names (partitions, features, users, accounts): within `max_labels`, each
    non-empty, within `max_id_chars`, each once."""
    if not labels:
        return True
    if len(labels) > config.max_labels:
        out.add(path, f"{len(labels)} names exceed the limit of {config.max_labels} "
                "(max_labels)")
        return False
    ok, seen = True, set()
    for k, label in enumerate(labels):
        if not label:
            out.add(f"{path}[{k}]", "must not be empty")
            ok = False
        elif len(label) > config.max_id_chars:
            out.add(f"{path}[{k}]", f"{len(label)} characters exceed the limit of "
                    f"{config.max_id_chars} (max_id_chars)")
            ok = False
        elif label in seen:
            out.add(f"{path}[{k}]", f"duplicate name {shown(label)}")
            ok = False
        seen.add(label)
    return ok


def labels_within(labels: Sequence[str], config: ServerConfig) -> bool:
    """`check_labels` without saying why (the fast paths)."""
    return not labels or (
        len(labels) <= config.max_labels and len(set(labels)) == len(labels)
        and all(0 < len(label) <= config.max_id_chars for label in labels))
