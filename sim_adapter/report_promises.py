"""The report's `promises.png`: each job's first promised start against its actual start.

One panel per series whose decisions reported starts (a run, or a dispatcher's pooled
sequences): a point per job given a start while it waited, at (the wait its first promise
meant, the wait it got), both axes logarithmic in hours. Points on the diagonal started
exactly when first promised, below it earlier, above it later: a kept promise never lies
above (a promise is a guarantee from requested times: only a node going down or a job running
past its limit puts a point there). Jobs that only ever had an estimate (no promise) are drawn
as crosses against their first estimate. Each panel's caption gives the share of promises kept
and the error of the likely start reported beside the first promise (the predictor's plan):
its median absolute value and the share within 1 h. Waits under a minute are drawn at one
minute.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .report_series import DPI, ONE_MINUTE_HOURS, WIDTH_INCHES, Series
from .report_tables import HOUR

COLUMNS = 3
PROMISE_COLOUR = "tab:blue"
ESTIMATE_COLOUR = "tab:orange"
LATE_COLOUR = "tab:red"


Points = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _points(one: Series) -> Points:
    """(first promise or estimate as a wait, actual wait, in hours; promised; the likely start
    beside the first promise as a wait in hours, NaN where none) pooled, as recorded (drawn at
    one minute at least: `_drawn`)."""
    first: list[float] = []
    actual: list[float] = []
    promised: list[bool] = []
    likely: list[float] = []
    for run in one.runs:
        f, a, p, li = run.reported_starts()
        first += f
        actual += a
        promised += p
        likely += li
    return (np.asarray(first) / HOUR, np.asarray(actual) / HOUR,
            np.asarray(promised, dtype=bool), np.asarray(likely, dtype=float) / HOUR)


def _drawn(hours: np.ndarray) -> np.ndarray:
    """Waits as drawn on the log axes: under a minute at one minute."""
    return np.maximum(hours, ONE_MINUTE_HOURS)


def _caption(first: np.ndarray, actual: np.ndarray, promised: np.ndarray,
             likely: np.ndarray | None = None) -> str:
    """The panel's figures, on the recorded waits (hours): promises kept, the likely start's
    error beside them, estimates on time."""
    parts = []
    if promised.any():
        kept = float(np.mean(actual[promised] <= first[promised]))
        parts.append(f"{int(promised.sum()):,} promised, {kept:.1%} kept")
        given = promised & ~np.isnan(likely) if likely is not None else promised & False
        if likely is not None and given.any():
            error = np.abs(actual[given] - likely[given])
            parts[-1] += (f", likely |err| p50 {float(np.median(error)):.2f} h, "
                          f"{float(np.mean(error <= 1.0)):.0%} within 1 h")
    if (~promised).any():
        on_time = float(np.mean(actual[~promised] <= first[~promised]))
        parts.append(f"{int((~promised).sum()):,} estimated, {on_time:.1%} on time")
    return "; ".join(parts)


def promises_figure(series: Sequence[Series], path: Path) -> Path | None:
    """promises.png (module doc); None, and no file, when no series reported a start."""
    import matplotlib.pyplot as plt

    drawn = [(one, _points(one)) for one in series]
    drawn = [(one, points) for one, points in drawn if len(points[0])]
    if not drawn:
        return None
    rows = -(-len(drawn) // COLUMNS)
    columns = min(COLUMNS, len(drawn))
    fig, axes = plt.subplots(rows, columns, figsize=(WIDTH_INCHES, 0.6 + 3.6 * rows),
                             sharex=True, sharey=True, squeeze=False)
    top = max(float(max(p[0].max(), p[1].max(), ONE_MINUTE_HOURS)) for _, p in drawn) * 1.5
    for ax, (one, (first, actual, promised, likely)) in zip(axes.flat, drawn, strict=False):
        late = promised & (actual > first)  # on the recorded times, not the drawn ones
        kept = promised & ~late
        ax.set_title(f"{one.name}\n{_caption(first, actual, promised, likely)}", fontsize=8)
        first, actual = _drawn(first), _drawn(actual)
        ax.scatter(first[kept], actual[kept], s=6, color=PROMISE_COLOUR, alpha=0.5,
                   linewidths=0, label="promise kept")
        ax.scatter(first[late], actual[late], s=10, color=LATE_COLOUR, alpha=0.8,
                   linewidths=0, label="promise broken (started later)")
        ax.scatter(first[~promised], actual[~promised], s=10, marker="x",
                   color=ESTIMATE_COLOUR, alpha=0.6, linewidths=0.8, label="estimate only")
        ax.plot([ONE_MINUTE_HOURS, top], [ONE_MINUTE_HOURS, top], color="black",
                linewidth=0.8, linestyle="--")
        ax.set(xscale="log", yscale="log", xlim=(ONE_MINUTE_HOURS * 0.8, top),
               ylim=(ONE_MINUTE_HOURS * 0.8, top))
        ax.grid(True, which="major", alpha=0.3)
    for ax in list(axes.flat)[len(drawn):]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    header = 0.5 / (0.6 + 3.6 * rows)  # of the figure's height: the title and the legend
    fig.suptitle("first promised start against actual start (above the diagonal: later "
                 "than promised)", fontsize=11, x=0.01, y=1 - header / 10, ha="left",
                 va="top")
    fig.legend(handles, labels, loc="upper left", bbox_to_anchor=(0.01, 1 - header * 0.4),
               fontsize=8, ncols=3, markerscale=2, frameon=False)
    fig.supxlabel("wait the first promise (or estimate) meant [h]", fontsize=10)
    fig.supylabel("wait the job got [h]", fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 1 - header))
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path
