"""What the report's figures share: the series they draw (a run, or a dispatcher's pooled
sequences), a colour per series, and the figures' width and resolution.

A module of its own, below `report_plots` and `report_promises`, so that neither imports the
other's figures to get them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .report_run import Run
from .report_tables import HOUR, sequence_id

WIDTH_INCHES = 11.0
DPI = 100
ONE_MINUTE_HOURS = 1 / 60


@dataclass(slots=True)
class Series:
    name: str
    colour: Any
    runs: list[Run] = field(default_factory=list)

    def pooled_jobs(self) -> tuple[np.ndarray, np.ndarray]:
        """(waits in hours, bounded slowdowns) of all the series' jobs."""
        waits: list[float] = []
        slowdowns: list[float] = []
        for run in self.runs:
            w, s = run.jobs()
            waits += w
            slowdowns += s
        return np.asarray(waits) / HOUR, np.asarray(slowdowns)


def colours(count: int) -> list[Any]:
    import matplotlib

    if count <= 20:  # the qualitative maps: tab10's colours, or tab20's
        qualitative = matplotlib.colormaps["tab10" if count <= 10 else "tab20"]
        return [qualitative(i) for i in range(count)]
    return [matplotlib.colormaps["turbo"](x) for x in np.linspace(0.05, 0.95, count)]


def series_of(runs: Sequence[Run]) -> list[Series]:
    """Runs of `--sequences` grouped by label; other runs one series each (named by the
    label, with the run folder's name where two share a label)."""
    keys: list[str] = []
    groups: dict[str, list[Run]] = {}
    labels = [r.label for r in runs]
    for run in runs:
        if sequence_id(run.summary):
            key = run.label
        else:
            key = run.label if labels.count(run.label) == 1 else f"{run.label} ({run.path.name})"
        if key not in groups:
            keys.append(key)
            groups[key] = []
        groups[key].append(run)
    return [Series(key, colour, groups[key])
            for key, colour in zip(keys, colours(len(keys)), strict=True)]
