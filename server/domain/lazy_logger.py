"""A named structlog logger that imports structlog when it first logs.

The core and the pipeline log only when something fails (a dispatcher or predictor that cannot
load or breaks, a fallback), so a replay that fails nowhere need not import structlog, nor what
structlog imports where it is installed (rich: about 0.1 s of CPU at start-up). The logger it
binds is `structlog.get_logger(name)`, which reads structlog's configuration at each call, as a
module-level one does: the same lines, to the same place.
"""

from __future__ import annotations

from typing import Any


class LazyLogger:
    """`structlog.get_logger(name)`, made on the first attribute asked for (`log.error(...)`)."""

    __slots__ = ("_bound", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._bound: Any = None

    def __getattr__(self, method: str) -> Any:
        if self._bound is None:
            import structlog

            self._bound = structlog.get_logger(self.name)
        return getattr(self._bound, method)
