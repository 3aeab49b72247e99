"""Runs side by side: a comparison table and PNG plots.

A run directory holds `summary.json` (per-run figures), `jobs.csv` and `decisions.csv` (see
`outputs`). Plots: mean ± std of slowdown, bounded slowdown and wait per run (as in the
papers' figures), the decision-time distribution, and the queue length over time.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SUMMARY = "summary.json"


@dataclass(frozen=True, slots=True)
class Run:
    path: Path
    summary: dict[str, Any]

    @property
    def label(self) -> str:
        return str(self.summary.get("label", self.path.name))

    def decisions(self) -> tuple[list[float], list[int], list[float]]:
        """(times, queue lengths, decision seconds) from decisions.csv; empty without it."""
        times: list[float] = []
        queue: list[int] = []
        seconds: list[float] = []
        path = self.path / "decisions.csv"
        if not path.exists():
            return times, queue, seconds
        with path.open(newline="", encoding="utf-8") as handle:
            for row in csv.DictReader(handle):
                times.append(float(row["time"]))
                queue.append(int(row["queue_length"]))
                seconds.append(float(row["decision_seconds"]))
        return times, queue, seconds


def find_runs(paths: Iterable[Path]) -> list[Run]:
    """Run directories given directly, or found one level below a given directory."""
    runs: list[Run] = []
    for path in paths:
        candidates = [path] if (path / SUMMARY).exists() else sorted(
            p for p in path.iterdir() if (p / SUMMARY).exists()
        ) if path.is_dir() else []
        if not candidates:
            raise FileNotFoundError(f"{path}: no {SUMMARY} here or in its subdirectories")
        for run in candidates:
            runs.append(Run(run, json.loads((run / SUMMARY).read_text(encoding="utf-8"))))
    return runs


def _get(summary: dict[str, Any], *keys: str) -> Any:
    value: Any = summary
    for key in keys:
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


COLUMNS: tuple[tuple[str, tuple[str, ...], float, int], ...] = (
    # header, path in the summary, scale, digits
    ("jobs", ("jobs",), 1, 0),
    ("mean bsld", ("bounded_slowdown", "mean"), 1, 2),
    ("std bsld", ("bounded_slowdown", "std"), 1, 1),
    ("mean sld", ("slowdown", "mean"), 1, 2),
    ("mean wait [s]", ("wait_seconds", "mean"), 1, 0),
    ("std wait [s]", ("wait_seconds", "std"), 1, 0),
    ("util", ("utilisation",), 1, 3),
    ("makespan [h]", ("makespan_seconds",), 1 / 3600, 1),
    ("decisions", ("decisions",), 1, 0),
    ("dec p50 [ms]", ("decision_seconds", "p50"), 1000, 1),
    ("dec p99 [ms]", ("decision_seconds", "p99"), 1000, 1),
    ("dec max [ms]", ("decision_seconds", "max"), 1000, 1),
    ("pred MAE [s]", ("predictor_accuracy", "mae_seconds"), 1, 0),
    ("replay [s]", ("replay_seconds",), 1, 1),
)


def comparison_table(summaries: Sequence[dict[str, Any]]) -> str:
    """A fixed-width text table, one row per run."""
    header = ["run", *(c[0] for c in COLUMNS)]
    rows = [header]
    for s in summaries:
        row = [str(s.get("label", "?"))]
        for _, keys, scale, digits in COLUMNS:
            value = _get(s, *keys)
            if isinstance(value, int | float) and not isinstance(value, bool):
                scaled = float(value) * scale
                value = round(scaled) if digits == 0 else scaled
            row.append(_fmt(value, digits))
        rows.append(row)
    return fixed_width(rows)


def fixed_width(rows: Sequence[Sequence[str]]) -> str:
    """Rows of cells (the first is the header) as aligned text: the first column left, the
    others right, a rule under the header."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                  for i, (cell, w) in enumerate(zip(row, widths, strict=True)))
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def write_plots(runs: Sequence[Run], out_dir: Path) -> list[Path]:
    """The PNG figures; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    labels = [r.label for r in runs]
    written: list[Path] = []

    fig, axes = plt.subplots(1, 3, figsize=(4 + 2.2 * len(runs), 4.2))
    for ax, (key, title) in zip(
        axes,
        (("slowdown", "slowdown"), ("bounded_slowdown", "bounded slowdown (10 s)"),
         ("wait_seconds", "wait [s]")),
        strict=True,
    ):
        means = [_get(r.summary, key, "mean") or 0.0 for r in runs]
        stds = [_get(r.summary, key, "std") or 0.0 for r in runs]
        ax.bar(range(len(runs)), means, yerr=stds, capsize=4, color="tab:blue", alpha=0.8)
        ax.set_xticks(range(len(runs)), labels, rotation=30, ha="right", fontsize=8)
        ax.set_title(f"mean ± std {title}")
        ax.set_ylim(bottom=0)
    fig.tight_layout()
    written.append(_save(fig, out_dir / "slowdown_wait.png", plt))

    series = [r.decisions() for r in runs]
    fig, ax = plt.subplots(figsize=(4 + 1.5 * len(runs), 4.2))
    data = [[max(s * 1000, 1e-3) for s in sec] or [1e-3] for _, _, sec in series]
    ax.boxplot(data, whis=(1, 99), showfliers=False)
    ax.set_xticks(range(1, len(runs) + 1), labels, rotation=30, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("decision time [ms] (box: quartiles, whiskers: p1-p99)")
    ax.set_title("decision time per run")
    fig.tight_layout()
    written.append(_save(fig, out_dir / "decision_time.png", plt))

    fig, ax = plt.subplots(figsize=(9, 4.2))
    for run, (times, queue, _) in zip(runs, series, strict=True):
        if times:
            start = times[0]
            ax.step([(t - start) / 3600 for t in times], queue, where="post", label=run.label,
                    linewidth=0.8)
    ax.set_xlabel("hours since the first decision")
    ax.set_ylabel("queued jobs at each decision")
    ax.set_title("queue length over time")
    ax.legend(fontsize=8)
    fig.tight_layout()
    written.append(_save(fig, out_dir / "queue_length.png", plt))
    return written


def _save(fig: Any, path: Path, plt: Any) -> Path:
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
