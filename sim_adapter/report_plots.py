"""The report's PNG figures, 1,100 px wide whatever the number of runs.

- `slowdown_wait.png`: the tail, as a researcher reads it: the share of jobs whose bounded
  slowdown / wait exceeds x (complementary CDF), both axes logarithmic;
- `decision_time.png`: the decision-time distribution per series (box: quartiles, whiskers:
  p1-p99), horizontal so that long names stay readable;
- `queue_length.png`: queued jobs over time, one row per series, in time bins (hour, 6 h,
  day or week, whichever gives at most `MAX_BINS` bins): the time-weighted mean as a line and
  the bin's min-max as a band, of the queue each decision leaves (held until the next one);
- `sequences.png` (runs of `--sequences` only): each sequence's mean bounded slowdown and
  longest wait per dispatcher, sequence ids on the x axis, and per dispatcher the spread over
  the sequences;
- `promises.png` (runs whose decisions reported waiting jobs' starts only): each job's first
  promise against its actual start (`report_promises`).

A series is a run, or for runs of `--sequences` a dispatcher (its label) with all its
sequences' jobs pooled. Each series has its own colour (no repeats: tab10, tab20, then evenly
spaced on a continuous map; `report_series`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .report_promises import promises_figure
from .report_run import Run
from .report_series import DPI, ONE_MINUTE_HOURS, WIDTH_INCHES, Series, series_of
from .report_tables import HOUR, sequence_id

MAX_BINS = 400
BINS = ((HOUR, "hour"), (6 * HOUR, "6 hours"), (24 * HOUR, "day"), (7 * 24 * HOUR, "week"))


def write_plots(runs: Sequence[Run], out_dir: Path) -> list[Path]:
    """The PNG figures; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    out_dir.mkdir(parents=True, exist_ok=True)
    series = series_of(runs)
    written = [
        tails_figure(series, out_dir / "slowdown_wait.png"),
        decision_time_figure(series, out_dir / "decision_time.png"),
        queue_figure(series, out_dir / "queue_length.png"),
    ]
    if any(sequence_id(r.summary) for r in runs):
        written.append(sequences_figure(series, out_dir / "sequences.png"))
    if (promises := promises_figure(series, out_dir / "promises.png")) is not None:
        written.append(promises)
    return written


def _matplotlib_at_least(major: int, minor: int) -> bool:
    import matplotlib

    found = tuple(int(part) for part in matplotlib.__version__.split(".")[:2])
    return found >= (major, minor)


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def ccdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(x, share of values > x) at each sorted value, without the final 0 (log axes)."""
    xs = np.sort(values)
    shares = 1.0 - np.arange(1, len(xs) + 1) / len(xs)
    keep = shares > 0
    return xs[keep], shares[keep]


def tails_figure(series: Sequence[Series], path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(WIDTH_INCHES, 4.8))
    for one in series:
        waits, slowdowns = one.pooled_jobs()
        if not len(waits):
            continue
        pooled = f", {len(one.runs)} sequences pooled" if len(one.runs) > 1 else ""
        x, y = ccdf(slowdowns)
        left.step(x, y, where="post", color=one.colour, linewidth=1.4,
                  label=f"{one.name}: mean {slowdowns.mean():,.1f}, "
                        f"p99 {np.percentile(slowdowns, 99):,.0f}{pooled}")
        x, y = ccdf(np.maximum(waits, ONE_MINUTE_HOURS))
        waited = float(np.mean(waits > ONE_MINUTE_HOURS))
        right.step(x, y, where="post", color=one.colour, linewidth=1.4,
                   label=f"{one.name}: {waited:.0%} wait > 1 min, "
                         f"p99 {np.percentile(waits, 99):,.1f} h, max {waits.max():,.1f} h")
    left.set(xscale="log", yscale="log", xlabel="bounded slowdown (10 s) x",
             ylabel="share of jobs with a larger one",
             title="bounded slowdown: tail (complementary CDF)")
    right.set(xscale="log", yscale="log", xlabel="wait x [h] (waits under 1 min not shown)",
              ylabel="share of jobs that waited longer",
              title="wait: tail (complementary CDF)")
    right.set_xlim(left=ONE_MINUTE_HOURS)
    for ax in (left, right):
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    return _save(fig, path)


def decision_time_figure(series: Sequence[Series], path: Path) -> Path:
    import matplotlib.pyplot as plt

    data = []
    for one in series:
        seconds = [s for run in one.runs for s in run.decisions()[2]]
        data.append(np.maximum(np.asarray(seconds or [0.0]) * 1000, 1e-3))
    fig, ax = plt.subplots(figsize=(WIDTH_INCHES, 1.4 + 0.45 * len(series)))
    horizontal = ({"orientation": "horizontal"} if _matplotlib_at_least(3, 10)
                  else {"vert": False})
    boxes = ax.boxplot(data, whis=(1, 99), showfliers=False, patch_artist=True,
                       medianprops={"color": "black"}, **horizontal)
    for box, one in zip(boxes["boxes"], series, strict=True):
        box.set(facecolor=one.colour, alpha=0.7)
    for row, values in enumerate(data, 1):
        ax.plot(values.max(), row, marker="x", color="black", markersize=5)
    ax.set_yticks(range(1, len(series) + 1), [one.name for one in series], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("decision time [ms] (box: quartiles, whiskers: p1-p99, x: longest)")
    ax.set_title("decision time")
    ax.grid(True, axis="x", which="major", alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)


def time_bin(span_seconds: float) -> tuple[float, str]:
    """The smallest bin of BINS giving at most MAX_BINS bins over the span."""
    for seconds, name in BINS:
        if span_seconds / seconds <= MAX_BINS:
            return seconds, name
    return BINS[-1]


def binned_queue(times: Sequence[float], queue: Sequence[int],
                 bin_seconds: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(bin starts in seconds since the first decision, time-weighted mean, min, max) of the
    queue length each decision left, which holds until the next one: sampled 60 times per bin, the
    last bin (up to the last decision, often a part of a bin) over the time it covers."""
    t = np.asarray(times, dtype=float) - times[0]
    q = np.asarray(queue, dtype=float)
    span = float(t[-1])
    bins = max(1, math.ceil(span / bin_seconds))
    starts = np.arange(bins) * bin_seconds
    widths = np.minimum(starts + bin_seconds, max(span, 0.0)) - starts  # the last: a part
    samples = starts[:, None] + widths[:, None] * (np.arange(60) / 60)[None, :]
    values = q[np.searchsorted(t, samples, side="right") - 1]
    return starts, values.mean(axis=1), values.min(axis=1), values.max(axis=1)


def queue_figure(series: Sequence[Series], path: Path) -> Path:
    import matplotlib.pyplot as plt

    decisions = {id(run): run.decisions() for one in series for run in one.runs}
    spans = [d[0][-1] - d[0][0] for d in decisions.values() if d[0]]
    bin_seconds, bin_name = time_bin(max(spans, default=HOUR))
    unit, unit_name = (24 * HOUR, "days") if max(spans, default=0) > 3 * 24 * HOUR else (
        HOUR, "hours")
    row_height = max(1.1, min(1.9, 11 / max(len(series), 1)))
    fig, axes = plt.subplots(len(series), 1, figsize=(WIDTH_INCHES, 1.0 + row_height *
                                                      len(series)),
                             sharex=True, sharey=True, squeeze=False)
    top = 0.0
    for ax, one in zip(axes[:, 0], series, strict=True):
        for run in one.runs:
            times, queue, _ = decisions[id(run)]
            if not times:
                continue
            starts, mean, low, high = binned_queue(times, queue, bin_seconds)
            top = max(top, float(high.max()) if len(one.runs) == 1 else float(mean.max()))
            x = (starts + bin_seconds / 2) / unit
            if len(one.runs) == 1:
                ax.fill_between(x, low, high, color=one.colour, alpha=0.25, linewidth=0)
                ax.plot(x, mean, color=one.colour, linewidth=1.2)
            else:
                ax.plot(x, mean, color=one.colour, linewidth=0.8, alpha=0.6)
        pooled = f" ({len(one.runs)} sequences)" if len(one.runs) > 1 else ""
        ax.text(0.005, 0.93, one.name + pooled, transform=ax.transAxes, fontsize=8,
                va="top", bbox={"facecolor": "white", "alpha": 0.8, "linewidth": 0})
        ax.grid(True, alpha=0.3)
    axes[0, 0].set_ylim(0, max(1.0, top) * 1.05)  # shared by the rows
    axes[-1, 0].set_xlabel(f"{unit_name} since the first decision")
    fig.supylabel("queued jobs", fontsize=10)
    band = "line: time-weighted mean, band: min-max" if any(
        len(one.runs) == 1 for one in series) else "one line per sequence: time-weighted mean"
    fig.suptitle(f"queue length per {bin_name} ({band})", fontsize=11)
    fig.tight_layout()
    return _save(fig, path)


def sequences_figure(series: Sequence[Series], path: Path) -> Path:
    import matplotlib.pyplot as plt

    ids = sorted({sequence_id(r.summary) for one in series for r in one.runs})
    fig, axes = plt.subplots(2, 2, figsize=(WIDTH_INCHES, 7.5), sharey="row",
                             gridspec_kw={"width_ratios": [3, 1]})
    figures = (("bounded_slowdown", "mean", 1.0, "mean bounded slowdown", "log"),
               ("wait_seconds", "max", 1 / HOUR, "longest wait [h]", "linear"))
    offsets = np.linspace(-0.25, 0.25, len(series)) if len(series) > 1 else np.zeros(1)
    for row, (key, stat, scale, title, yscale) in enumerate(figures):
        per_sequence, spread = axes[row]
        per_series = []
        for one, offset in zip(series, offsets, strict=True):
            points = {sequence_id(r.summary): value for r in one.runs
                      if isinstance(value := (r.summary.get(key) or {}).get(stat), int | float)}
            xs = [i + offset for i, s in enumerate(ids) if s in points]
            ys = [float(points[s]) * scale for s in ids if s in points]
            per_sequence.scatter(xs, ys, color=one.colour, s=22, label=one.name, zorder=3)
            per_series.append(ys)
        per_sequence.set_xticks(range(len(ids)), ids, rotation=90 if len(ids) > 12 else 0,
                                fontsize=8)
        per_sequence.set_ylabel(title)
        per_sequence.set_yscale(yscale)
        if yscale == "linear":
            per_sequence.set_ylim(bottom=0)
        per_sequence.grid(True, alpha=0.3)
        boxes = spread.boxplot([ys or [np.nan] for ys in per_series], patch_artist=True,
                               medianprops={"color": "black"}, showmeans=True,
                               meanprops={"marker": "D", "markerfacecolor": "white",
                                          "markeredgecolor": "black", "markersize": 4})
        for box, one in zip(boxes["boxes"], series, strict=True):
            box.set(facecolor=one.colour, alpha=0.7)
        spread.set_xticks(range(1, len(series) + 1), [one.name for one in series],
                          rotation=30, ha="right", fontsize=7)
        spread.grid(True, axis="y", alpha=0.3)
        if row == 0:
            per_sequence.set_title("per sequence")
            spread.set_title("over the sequences (◇ mean)")
            per_sequence.legend(fontsize=7, ncols=min(len(series), 4), loc="upper left")
    fig.tight_layout()
    return _save(fig, path)
