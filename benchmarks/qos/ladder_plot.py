"""One plot per pair (case, predictor): the promise book's ladder against the classical rules.

Mean bounded slowdown against the longest wait, utilisation as colour. The ladder's rungs are
joined in their order (every job promised at arrival → only EASY's head), the default rung
starred; each classical rule is a labelled square with its dominance box drawn behind it: a
rung inside the box (no longer wait, a mean at most 0.95 × the rule's) beats it on both, when
its utilisation (colour; hollow: below the rule's − 0.005) holds too.
"""

from __future__ import annotations

from pathlib import Path

from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from benchmarks.qos.frontier_plot import place_labels, scaled_axis
from benchmarks.qos.ladder_verdicts import MEAN_FACTOR, Pair, Run
from hpcdispatch.server.domain.promise_ladder import DEFAULT_RUNG, LADDER

CMAP = colormaps["viridis"]


def _point(run: Run) -> tuple[float, float] | None:
    f = run.figures
    if f.max_wait is None or f.bsld is None or f.max_wait <= 0:
        return None
    return f.max_wait / 3600, f.bsld


def plot_pair(pair: Pair, path: Path) -> bool:
    """Write the pair's plot to `path`; False when it has no rung and no rule to draw."""
    runs = {**pair.rules, **pair.rungs}
    points = {name: p for name, run in runs.items() if (p := _point(run)) is not None}
    if not points:
        return False
    utils = [r.figures.util for r in runs.values() if r.figures.util is not None]
    norm = Normalize(min(utils, default=0.0) - 1e-3, max(utils, default=1.0) + 1e-3)
    fig = Figure(figsize=(8.5, 6.0), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    scaled_axis(ax, "x", [x for x, _ in points.values()])
    scaled_axis(ax, "y", [y for _, y in points.values()]
          + [MEAN_FACTOR * points[n][1] for n in pair.rules if n in points])
    for name in pair.rules:  # each rule's dominance box, behind everything
        if name in points:
            x, y = points[name]
            ax.add_patch(Rectangle((ax.get_xlim()[0], ax.get_ylim()[0]),
                                   x - ax.get_xlim()[0], MEAN_FACTOR * y - ax.get_ylim()[0],
                                   color="0.5", alpha=0.06, lw=0, zorder=0))
    ladder = [s.name for s in LADDER if s.name in points]
    ax.plot([points[n][0] for n in ladder], [points[n][1] for n in ladder], color="0.35",
            lw=1.0, zorder=2)
    for name, (x, y) in points.items():
        run = runs[name]
        util = run.figures.util
        colour = CMAP(norm(util)) if util is not None else "0.6"
        marker = "*" if name == DEFAULT_RUNG else "s" if name in pair.rules else "o"
        ax.scatter([x], [y], s=300 if marker == "*" else 80, marker=marker, zorder=3,
                   facecolors=[colour], edgecolors="black", linewidths=0.7)
    ax.set_xlabel("longest wait [h]")
    ax.set_ylabel("mean bounded slowdown")
    ax.grid(True, which="major", alpha=0.25)
    ax.set_title(f"{pair.case.key}, {pair.predictor}: the ladder (circles, ★ the default rung) "
                 "and the classical rules (squares)", fontsize=10)
    fig.canvas.draw()
    place_labels(ax, [(n, x, y, runs[n].figures.util) for n, (x, y) in points.items()],
                  fig.canvas.get_renderer())  # type: ignore[attr-defined]
    fig.colorbar(ScalarMappable(norm=norm, cmap=CMAP), ax=ax, label="utilisation (makespan)")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return True
