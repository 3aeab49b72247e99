"""A service on loopback for the duration of a `with` block (the embedded default)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import structlog

from ..config import load_config
from ..logging_config import configure_logging
from .app import start_server


@contextmanager
def embedded_server(quiet: bool = True, **overrides: Any) -> Iterator[str]:
    """Yield the target "127.0.0.1:PORT" of a fresh server; stop it on exit.

    `overrides` are ServerConfig keys. With `quiet`, the process logs errors only while the
    server runs (the service would otherwise print one line per decision into the caller's
    terminal); the logging set-up is restored on exit.
    """
    config = dataclasses.replace(load_config(env={}), listen="127.0.0.1:0", **overrides)
    saved = structlog.get_config()
    if quiet:
        configure_logging(config.log_format, "error")
    running = start_server(config)
    try:
        yield running.target
    finally:
        running.stop(grace=1.0)
        structlog.configure(**saved)
