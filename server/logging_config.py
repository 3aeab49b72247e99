"""structlog set up once per process: JSON lines in production, readable lines in development.

Every line carries the context variables bound for the current request (request_id,
snapshot_time; see request_id.py), a UTC timestamp, the level and the event.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog

LOG_FORMATS = ("auto", "json", "console")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def resolve_format(log_format: str, stream: TextIO) -> str:
    """"auto" is console on a terminal, JSON otherwise (containers, files, pipes)."""
    if log_format not in LOG_FORMATS:
        raise ValueError(f"configuration key 'log_format': {log_format!r} is not one of "
                         f"{list(LOG_FORMATS)}")
    if log_format != "auto":
        return log_format
    isatty = getattr(stream, "isatty", None)
    return "console" if isatty is not None and isatty() else "json"


def configure_logging(
    log_format: str = "auto", log_level: str = "info", stream: TextIO | None = None
) -> None:
    """Configure structlog for the whole process; lines go to `stream` (default stderr)."""
    out = sys.stderr if stream is None else stream
    if log_level.lower() not in LOG_LEVELS:
        raise ValueError(f"configuration key 'log_level': {log_level!r} is not one of "
                         f"{list(LOG_LEVELS)}")
    level = logging.getLevelNamesMapping()[log_level.upper()]
    fmt = resolve_format(log_format, out)
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    renderer: list[structlog.types.Processor] = (
        [structlog.processors.dict_tracebacks, structlog.processors.JSONRenderer()]
        if fmt == "json"
        else [structlog.dev.ConsoleRenderer(colors=bool(getattr(out, "isatty", bool)()))]
    )
    structlog.configure(
        processors=[*shared, *renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )
