"""A service on loopback for the duration of a `with` block (the embedded default)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hpcdispatch.server.app import start_server
from hpcdispatch.server.config import load_config


@contextmanager
def embedded_server(**overrides: Any) -> Iterator[str]:
    """Yield the target "127.0.0.1:PORT" of a fresh server; stop it on exit."""
    config = dataclasses.replace(load_config(env={}), listen="127.0.0.1:0", **overrides)
    running = start_server(config)
    try:
        yield running.target
    finally:
        running.stop(grace=1.0)
