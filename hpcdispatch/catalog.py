"""Names of dispatchers, predictors and allocators: the contract's enums, and the dispatchers and
predictors registered by name (entry points, `hpcdispatch.registrations`); and the name logs give
a session.

The contract's enums name the built-ins: `DISPATCHER_PCP20` is called `pcp20` in configuration,
CLI flags, logs and metric labels, `PREDICTOR_LAST_TWO` is `last-two`. A value added to an enum
gets its name here without another table to edit. What a process can select is what is
registered (`dispatcher_names()`, `predictor_names()`): the built-ins, which hpcdispatch's
pyproject.toml registers under their enum names, and any plugin installed beside them. A
request selects a built-in by its enum value or its name, a plugin by its name
(`DispatchRequest.dispatcher_name`; `select_dispatcher` sets the right field).
"""

from __future__ import annotations

import hashlib
from functools import cache
from typing import Any

from hpcdispatch.v1 import dispatcher_pb2 as pb

from .registrations import (
    DISPATCHER_GROUP,
    PREDICTOR_GROUP,
    Registrations,
    installed,
)


def enum_names(enum: Any, prefix: str) -> dict[str, int]:
    """{"pcp20": 5, ...}: every value but *_UNSPECIFIED, named without the prefix, in lower case
    with dashes (the contract's `DISPATCHER_PCP20` -> `pcp20`)."""
    return {
        name.removeprefix(prefix).lower().replace("_", "-"): value
        for name, value in enum.items()
        if value
    }


DISPATCHER_NAMES: dict[str, int] = enum_names(pb.Dispatcher, "DISPATCHER_")
PREDICTOR_NAMES: dict[str, int] = enum_names(pb.Predictor, "PREDICTOR_")
ALLOCATOR_NAMES: dict[str, int] = enum_names(pb.Allocator, "ALLOCATOR_")
DISPATCHER_BY_KIND = {v: k for k, v in DISPATCHER_NAMES.items()}
PREDICTOR_BY_KIND = {v: k for k, v in PREDICTOR_NAMES.items()}
# The model-based dispatchers (the papers' PCP'20, PCP'19, HCP'19), as opposed to the baselines.
CP_DISPATCHER_NAMES: tuple[str, ...] = ("hcp19", "pcp19", "pcp20")


@cache
def registered_dispatchers() -> Registrations:
    """The dispatchers this process can select: the built-ins and the installed plugins."""
    return installed(DISPATCHER_GROUP, DISPATCHER_NAMES)


@cache
def registered_predictors() -> Registrations:
    """The predictors this process can select: the built-ins and the installed plugins."""
    return installed(PREDICTOR_GROUP, PREDICTOR_NAMES)


def dispatcher_names() -> tuple[str, ...]:
    """Every registered dispatcher's name: the contract's, in enum order, then the plugins'."""
    return registered_dispatchers().names


def predictor_names() -> tuple[str, ...]:
    """Every registered predictor's name: the contract's, in enum order, then the plugins'."""
    return registered_predictors().names


def _lookup(table: dict[str, int], what: str, name: str) -> int:
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"unknown {what} {name!r}; one of {sorted(table)}") from None


def _registered_kind(names: Registrations, what: str, name: str) -> int:
    entry = names.by_name(name)
    if entry is None:
        raise ValueError(f"unknown {what} {name!r}; one of {sorted(names.names)}")
    return entry.kind


def dispatcher_kind(name: str) -> int:
    """The kind of a registered dispatcher (its enum value for a built-in); ValueError else."""
    return _registered_kind(registered_dispatchers(), "dispatcher", name)


def predictor_kind(name: str) -> int:
    """The kind of a registered predictor (its enum value for a built-in); ValueError else."""
    return _registered_kind(registered_predictors(), "predictor", name)


def allocator_kind(name: str) -> int:
    return _lookup(ALLOCATOR_NAMES, "allocator", name)


def dispatcher_name(kind: int) -> str | None:
    """The registered name of a dispatcher kind; None for a kind nothing registered."""
    entry = registered_dispatchers().by_kind(kind)
    return None if entry is None else entry.name


def predictor_name(kind: int) -> str | None:
    """The registered name of a predictor kind; None for a kind nothing registered."""
    entry = registered_predictors().by_kind(kind)
    return None if entry is None else entry.name


def enum_value(kind: int, enum: Any) -> int:
    """What a kind is on the wire's enum field: its value for a built-in, 0 (unspecified) for a
    plugin, whose name goes in the `*_name` field instead."""
    return kind if kind in _values_of(enum) else 0


@cache
def _values_of(enum: Any) -> frozenset[int]:
    """The values of a generated enum (its `values()` builds a new list at every call)."""
    return frozenset(enum.values())


def select_dispatcher(request: Any, name: str) -> None:
    """Ask `request` (a DispatchRequest or UpdateSessionRequest) for the dispatcher `name`: the
    enum field for a built-in, which every server understands; `dispatcher_name` for a plugin."""
    if name in DISPATCHER_NAMES:
        request.dispatcher = DISPATCHER_NAMES[name]
    else:
        request.dispatcher_name = name


def select_predictor(request: Any, name: str) -> None:
    """As `select_dispatcher`, for the predictor."""
    if name in PREDICTOR_NAMES:
        request.predictor = PREDICTOR_NAMES[name]
    else:
        request.predictor_name = name


def reported_dispatcher(value: int, name: str) -> str:
    """The dispatcher a report or a description names: `name` when the server sent one, else
    the enum value's name (a server older than names)."""
    return name or DISPATCHER_BY_KIND.get(value, "")


def reported_predictor(value: int, name: str) -> str:
    """As `reported_dispatcher`, for the predictor."""
    return name or PREDICTOR_BY_KIND.get(value, "")


def session_tag(session_id: str) -> str:
    """A short name of a session id for logs: 8 hex digits of its hash, which tell sessions
    apart in a log without giving away the id (the secret that names the session). The
    server and its callers (the Slurm bridge) log the same tag for the same session."""
    return hashlib.blake2b(session_id.encode("utf-8", "replace"), digest_size=4).hexdigest()


def _stream_answer_fields() -> dict[str, str]:
    """{"open": "opened", "update": "updated", ...}: the SessionStreamResponse field that answers
    each SessionStreamRequest call field (the one whose type is the call's Response)."""
    answers = {f.message_type.name: f.name
               for f in pb.SessionStreamResponse.DESCRIPTOR.oneofs_by_name["answer"].fields
               if f.message_type is not None}
    return {f.name: answers[f.message_type.name.removesuffix("Request") + "Response"]
            for f in pb.SessionStreamRequest.DESCRIPTOR.oneofs_by_name["call"].fields}


# A session stream's calls (SessionStreamRequest's `call` fields) and the field of their answer.
STREAM_ANSWER_FIELDS: dict[str, str] = _stream_answer_fields()
