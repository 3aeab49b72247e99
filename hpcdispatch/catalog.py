"""Names of dispatchers, predictors and allocators, derived once from the contract's enums;
and the name logs give a session.

The wire contract (`hpcdispatch.v1`) is the one list of what exists: `DISPATCHER_PCP20` is
called `pcp20` in configuration, CLI flags, logs and metric labels, `PREDICTOR_LAST_TWO` is
`last-two`. A value added to an enum gets its name here without another table to edit; the
dispatcher and predictor registries are checked against these names by the tests.
"""

from __future__ import annotations

import hashlib
from typing import Any

from hpcdispatch.v1 import dispatcher_pb2 as pb


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


def _lookup(table: dict[str, int], what: str, name: str) -> int:
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"unknown {what} {name!r}; one of {sorted(table)}") from None


def dispatcher_kind(name: str) -> int:
    return _lookup(DISPATCHER_NAMES, "dispatcher", name)


def predictor_kind(name: str) -> int:
    return _lookup(PREDICTOR_NAMES, "predictor", name)


def allocator_kind(name: str) -> int:
    return _lookup(ALLOCATOR_NAMES, "allocator", name)


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
