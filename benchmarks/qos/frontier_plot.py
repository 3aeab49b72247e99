"""Frontier plots of issue #24: per case, mean bounded slowdown against longest wait.

One panel per predictor, one labelled point per run (baselines, the default, candidates),
utilisation as colour. The shaded band is the longest wait EASY's promise allows (≤ EASY's);
a hollow point has utilisation below EASY's − 0.005 (it breaks the other promise). So the
runs that keep both promises are the filled points in the band, and the target is the lowest
of those. `benchmarks.qos.targets` writes one PNG per case next to `qos.md`; this module
also makes them from a judged `qos.json`:

    python -m benchmarks.qos.frontier_plot benchmarks/results/qos/all-cases.json --out DIR
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.text import Text
from matplotlib.ticker import FuncFormatter, LogLocator

from benchmarks.qos.cases import CASES, DEFAULT, REFERENCE, Case
from benchmarks.qos.verdicts import UTIL_TOLERANCE, Figures, Judged, Row, frontier, judge

CMAP = colormaps["viridis"]
KEEPS = "#2ca02c"  # the band that keeps EASY's longest wait
Point = tuple[str, float, float, float | None]  # label, longest wait [h], mean bsld, util


def pair_points(rows: Sequence[Row], predictor: str) -> tuple[Figures, list[Point]] | None:
    """EASY's run and every run of one case and predictor as points; None without EASY."""
    mine = [r for r in rows if r.predictor == predictor]
    easy = mine[0].baselines.get(REFERENCE) if mine else None
    if easy is None or easy.max_wait is None or easy.bsld is None:
        return None
    named: dict[str, Figures] = {("default" if r.cp == DEFAULT else r.cp): r.mine
                                 for r in mine if r.mine is not None}
    for r in mine:
        named.update({b: f for b, f in r.baselines.items() if f is not None})
    points = [(name, f.max_wait / 3600, f.bsld, f.util) for name, f in named.items()
              if f.max_wait is not None and f.bsld is not None and f.max_wait > 0]
    return easy, points


def _limits(values: list[float], log: bool) -> tuple[float, float]:
    low, high = min(values), max(values)
    if log:
        pad = max(math.log10(high / low) * 0.12, 0.04)
        return low / 10 ** pad, high * 10 ** pad
    pad = (high - low) * 0.1 or abs(high) * 0.1 or 1.0
    return low - pad, high + pad


def scaled_axis(ax: Axes, which: str, values: list[float]) -> None:
    """Log scale when the values span more than 5×, with plain-number tick labels."""
    log = min(values) > 0 and max(values) / min(values) > 5
    lim = _limits(values, log)
    set_scale, set_lim, axis = ((ax.set_xscale, ax.set_xlim, ax.xaxis) if which == "x"
                                else (ax.set_yscale, ax.set_ylim, ax.yaxis))
    if log:
        set_scale("log")
        decades = math.log10(lim[1] / lim[0])
        subs = (1.0, 2.0, 5.0) if decades > 1.6 else (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 7.0)
        axis.set_major_locator(LogLocator(subs=subs))
        axis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    set_lim(*lim)


def _overlap(a: Any, b: Any) -> float:
    w = min(a.x1, b.x1) - max(a.x0, b.x0)
    h = min(a.y1, b.y1) - max(a.y0, b.y0)
    return w * h if w > 0 and h > 0 else 0.0


OFFSETS = [(d * dx, d * dy) for d in (1, 2.6, 4.2)
           for dx, dy in ((6, 4), (6, -4), (-6, 4), (-6, -4), (0, 9), (0, -9))]
NEAR = 12  # points: a label nearer than this to its point needs no leader line


def _align(note: Any, dx: float, dy: float) -> None:
    note.xyann = (dx, dy)
    note.set_ha("left" if dx > 0 else "right" if dx < 0 else "center")
    note.set_va("bottom" if dy > 0 else "top")


def _marker_size(name: str) -> float:
    """Area in points² of a run's marker (as `_panel` draws it)."""
    return 320 if name == "default" else 90 if name == REFERENCE else 75


def _nearer_to_another(box: Any, own: tuple[float, float], group: list[Point],
                       xy: dict[str, Any], ax: Axes) -> bool:
    """Whether the label's nearest point (by its box's centre) is another group's."""
    centre = ((box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2)
    mine = math.dist(centre, ax.transData.transform(own))
    names = {p[0] for p in group}
    return any(math.dist(centre, at) < mine for name, at in xy.items() if name not in names)


def place_labels(ax: Axes, points: list[Point], renderer: Any) -> None:
    """Label each point (points closer than 9 px share one label), choosing for each the
    nearest offset whose text overlaps no other label, marker or the axes' edge."""
    from matplotlib.transforms import Bbox

    xy = {p[0]: ax.transData.transform((p[1], p[2])) for p in points}
    groups: list[list[Point]] = []
    for p in sorted(points, key=lambda p: (p[0] != "default", p[2])):
        near = next((g for g in groups if math.dist(xy[g[0][0]], xy[p[0]]) < 9), None)
        if near is None:
            groups.append([p])
        else:
            near.append(p)
    px = renderer.points_to_pixels(1.0)
    markers = [Bbox.from_extents(x - r, y - r, x + r, y + r) for name, (x, y) in xy.items()
               for r in [math.sqrt(_marker_size(name)) / 2 * px + 2]]
    frame = ax.get_window_extent(renderer)
    placed: list[Any] = []
    for group in groups:
        name, x, y = ", ".join(p[0] for p in group), group[0][1], group[0][2]
        style: dict[str, Any] = {"fontsize": 8.5,
                                 "fontweight": "bold" if group[0][0] == "default" else None}
        note = ax.annotate(name, (x, y), xytext=(0, 0), textcoords="offset points", **style)
        best: tuple[float, tuple[float, float]] | None = None
        for dx, dy in OFFSETS:  # measured without a leader line: its clipping is slow
            _align(note, dx, dy)
            box = note.get_window_extent(renderer)
            cost = sum(_overlap(box, other) for other in placed + markers)
            cost += box.width * box.height - _overlap(box, frame)  # outside the axes
            cost += math.hypot(dx, dy) * 0.5  # nearer is better, all else equal
            cost += 400 * _nearer_to_another(box, (x, y), group, xy, ax)
            if best is None or cost < best[0]:
                best = (cost, (dx, dy))
        assert best is not None
        dx, dy = best[1]
        if math.hypot(dx, dy) > NEAR:
            note.remove()
            note = ax.annotate(name, (x, y), xytext=(0, 0), textcoords="offset points",
                               arrowprops={"arrowstyle": "-", "lw": 0.6, "color": "0.4",
                                           "shrinkA": 1, "shrinkB": 6}, **style)
        note.set_in_layout(False)
        _align(note, dx, dy)
        placed.append(Text.get_window_extent(note, renderer))  # the text, not its line


def _best_keeping(rows: Sequence[Row], predictor: str) -> str:
    found = frontier(rows, predictor)
    if found is None or found.best_keeping is None:
        return "no run keeps both promises"
    name, bsld = found.best_keeping
    return f"lowest mean keeping both: {name.split(' (')[0]} {bsld:.2f}"


def _panel(ax: Axes, case: Case, predictor: str, easy: Figures, points: list[Point],
           norm: Normalize, best: str) -> None:
    assert easy.max_wait is not None and easy.bsld is not None
    easy_wait = easy.max_wait / 3600
    scaled_axis(ax, "x", [p[1] for p in points] + [easy_wait])
    scaled_axis(ax, "y", [p[2] for p in points] + ([easy.bsld * 0.8] if case.moderate else []))
    ax.axvspan(ax.get_xlim()[0], easy_wait, color=KEEPS, alpha=0.10, zorder=0, lw=0)
    ax.axvline(easy_wait, color=KEEPS, ls="--", lw=1.2, zorder=1)
    ax.axhline(easy.bsld, color="0.35", ls=":", lw=1.0, zorder=1)
    if case.moderate:
        ax.axhline(easy.bsld * 0.8, color="0.35", ls="-.", lw=0.9, zorder=1)
    for name, x, y, util in points:
        colour = CMAP(norm(util)) if util is not None else "0.6"
        loses = (util is not None and easy.util is not None
                 and util < easy.util - UTIL_TOLERANCE)
        marker = "*" if name == "default" else "s" if name == REFERENCE else "o"
        size = _marker_size(name)
        ax.scatter([x], [y], s=size, marker=marker, zorder=3,
                   facecolors="white" if loses else [colour],
                   edgecolors=[colour] if loses else "black", linewidths=1.6 if loses else 0.7)
    ax.set_xlabel("longest wait [h]")
    ax.set_ylabel("mean bounded slowdown")
    ax.grid(True, which="major", alpha=0.25)
    ax.set_title(f"predictor: {predictor} — {best}", fontsize=11)


def _legend(fig: Figure, moderate: bool, rows: int) -> None:
    handles = [
        Line2D([], [], marker="*", ls="", ms=14, mfc="0.7", mec="black", label="the default"),
        Line2D([], [], marker="s", ls="", ms=8, mfc="0.7", mec="black", label="EASY"),
        Line2D([], [], marker="o", ls="", ms=8, mfc="0.7", mec="black", label="other baseline"),
        Line2D([], [], marker="o", ls="", ms=8, mfc="none", mec="0.3", mew=2,
               label=f"hollow: utilisation < EASY's − {UTIL_TOLERANCE}"),
        Patch(facecolor=KEEPS, alpha=0.25, label="longest wait ≤ EASY's"),
        Line2D([], [], color="0.35", ls=":", label="EASY's mean"),
    ]
    if moderate:
        handles.append(Line2D([], [], color="0.35", ls="-.", label="20 % below EASY's mean"))
    fig.legend(handles=handles, loc="outside lower center", ncols=math.ceil(len(handles) / rows),
               fontsize=9, frameon=False)


def plot_case(case: Case, rows: Sequence[Row], path: Path, default: str) -> bool:
    """One PNG of `case`'s frontiers (a panel per predictor with EASY's run); False when no
    predictor has one."""
    pairs = [(p, found) for p in dict.fromkeys(r.predictor for r in rows)
             if (found := pair_points(rows, p)) is not None]
    if not pairs:
        return False
    utils = [u for _, (_, pts) in pairs for *_, u in pts if u is not None]
    low, high = (min(utils), max(utils)) if utils else (0.0, 1.0)
    if high - low < 0.01:
        low, high = (low + high) / 2 - 0.005, (low + high) / 2 + 0.005
    norm = Normalize(low, high)
    ncols = 1 if len(pairs) == 1 else 2
    nrows = math.ceil(len(pairs) / ncols)
    width = 10.0 if ncols == 1 else 14.5
    fig = Figure(figsize=(width, 1.8 + 5.2 * nrows), dpi=100, layout="constrained")
    canvas = FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, (predictor, (easy, points)) in zip(axes, pairs, strict=False):
        _panel(ax, case, predictor, easy, points, norm, _best_keeping(rows, predictor))
    for ax in axes[len(pairs):]:
        ax.set_visible(False)
    fig.colorbar(ScalarMappable(norm, CMAP), ax=list(axes[:len(pairs)]), label="utilisation",
                 shrink=0.9)
    _legend(fig, case.moderate, 1 if ncols > 1 else 2)
    what = (f"mean bounded slowdown against longest wait (default = {default}); keeps "
            "EASY's promises = a filled point in the green band")
    fig.suptitle("\n".join(textwrap.fill(t, int(width * 8.5)) for t in (case.title, what)),
                 fontsize=12)
    canvas.draw()  # the layout is settled: label positions can be measured
    fig.set_layout_engine("none")  # and kept as it is (labels are placed inside the axes)
    renderer = canvas.get_renderer()
    for ax, (_, (_, points)) in zip(axes, pairs, strict=False):
        place_labels(ax, points, renderer)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return True


def plot_cases(judged: Judged, cases: Sequence[Case], out: Path) -> dict[str, str]:
    """`frontier-CASE.png` under `out` for each case with a frontier: case key -> file name."""
    written = {}
    for case in cases:
        rows = [r for r in judged.rows if r.case == case.key]
        name = f"frontier-{case.key}.png"
        if rows and plot_case(case, rows, out / name, judged.default):
            written[case.key] = name
    return written


def judged_document(document: dict[str, Any]) -> tuple[Judged, list[Case]]:
    """A judged `qos.json` judged again (its cases, predictors, baselines, candidates)."""
    cases = [CASES[k] for k in document.get("cases", []) if k in CASES]
    judged = judge([], cases, document.get("predictors", []),
                   document.get("baselines", []), document.get("candidates", []),
                   documents=[document])
    return judged, cases


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.qos.frontier_plot", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("document", type=Path, help="a judged qos.json (benchmarks.qos.targets)")
    p.add_argument("--out", type=Path, help="directory (default: the document's)")
    args = p.parse_args(argv)
    try:
        judged, cases = judged_document(json.loads(args.document.read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError) as exc:
        print(f"qos_frontier: {exc}", file=sys.stderr)
        return 2
    for name in plot_cases(judged, cases, args.out or args.document.parent).values():
        print((args.out or args.document.parent) / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
