"""Caller's values as errors and logs echo them: quoted, and cut short when long.

A value the caller sent (a job id, a resource type, a session id) can be megabytes long; echoed
whole, an error outgrows gRPC's default metadata limit (8 KB) and the caller sees
RESOURCE_EXHAUSTED instead of the error. Echoes keep the first SHOWN_CHARS characters and say
how long the value was.
"""

from __future__ import annotations

SHOWN_CHARS = 64


def shown(value: str, limit: int = SHOWN_CHARS) -> str:
    """`value` quoted (repr), its first `limit` characters only when longer, saying so:
    'aaaa…' (truncated, 20000000 characters)."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}… (truncated, {len(value)} characters)"


def clipped(text: str, limit: int) -> str:
    """`text` (a message, a field path) cut to about `limit` characters, saying so."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… (truncated, {len(text)} characters)"


def key_path(path: str, key: str) -> str:
    """A map entry's field path, `path["key"]`, its key cut short when long."""
    if len(key) <= SHOWN_CHARS:
        return f'{path}["{key}"]'
    return f'{path}["{key[:SHOWN_CHARS]}…" (truncated, {len(key)} characters)]'
