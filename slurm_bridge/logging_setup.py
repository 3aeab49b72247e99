"""structlog output of the bridge: key=value lines (default) or JSON lines, on stderr."""

from __future__ import annotations

import logging
import sys

import structlog


def configure_logging(fmt: str = "kv", level: str = "info") -> None:
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if fmt == "json"
        else structlog.processors.KeyValueRenderer(key_order=["timestamp", "level", "event"])
    )
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )
