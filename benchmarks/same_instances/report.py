"""Per-instance ratios of the same-instances benchmark, its Markdown summary and its plots.

Every ratio is taken per instance first (numerator and denominator measured on the same
instance in the same run), then summarised over the instances of a set: median and the
10th-90th percentile range. Time is the service's own decision time
(DecisionReport.total_seconds); the client's round trip adds the same gRPC cost to every
dispatcher and is kept in the CSV.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.same_instances.run import CP_DISPATCHERS, Row

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TARGET_VS_EASY = 10.0  # issue 5: the default CP dispatcher within 10× of EASY (median)
AT_BEST = 1 - 1e-9
Key = tuple[str, int]  # (set, instance)


@dataclass(frozen=True, slots=True)
class Spread:
    n: int
    median: float
    p10: float
    p90: float
    maximum: float

    def fmt(self, digits: int = 2) -> str:
        return (f"{_num(self.median, digits)} [{_num(self.p10, digits)}–"
                f"{_num(self.p90, digits)}]")


def _num(x: float, digits: int) -> str:
    if x != 0 and abs(x) < 10 ** -digits:
        return f"{x:.1e}"
    return f"{x:.{digits}f}"


def quantile(values: Sequence[float], q: float) -> float:
    data = sorted(values)
    pos = q * (len(data) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def spread(values: Sequence[float]) -> Spread | None:
    if not values:
        return None
    return Spread(len(values), statistics.median(values), quantile(values, 0.1),
                  quantile(values, 0.9), max(values))


def by_instance(rows: Iterable[Row]) -> dict[Key, dict[str, Row]]:
    out: dict[Key, dict[str, Row]] = defaultdict(dict)
    for row in rows:
        out[(row.set, row.instance)][row.label] = row
    return out


def paired_ratios(
    rows: Iterable[Row], num: str, den: str, value: Callable[[Row], float]
) -> dict[str, list[float]]:
    """Per set, value(num) / value(den) on each instance where both are > 0."""
    out: dict[str, list[float]] = defaultdict(list)
    for (set_name, _), labels in by_instance(rows).items():
        a, b = labels.get(num), labels.get(den)
        if a is not None and b is not None and value(a) > 0 and value(b) > 0:
            out[set_name].append(value(a) / value(b))
    return out


def variables(row: Row) -> float:
    """Model variables, also where the service needed no model
    (benchmarks.same_instances.model_size)."""
    return float(row.model_variables)


def decision_ms(row: Row) -> float:
    return row.decision_ms


def wall_ms(row: Row) -> float:
    return row.wall_ms


def quality_ratios(rows: Iterable[Row]) -> dict[tuple[str, str], list[float]]:
    """Per (set, label): started_priority / the best (largest) on the instance; 1 = best.
    Instances where no dispatcher starts anything are left out (nothing to compare)."""
    out: dict[tuple[str, str], list[float]] = defaultdict(list)
    for (set_name, _), labels in by_instance(rows).items():
        best = max(r.started_priority for r in labels.values())
        if best <= 0:
            continue
        for label, row in labels.items():
            out[(set_name, label)].append(row.started_priority / best)
    return out


NO_SOLUTION = frozenset({"unknown", "heuristic", "fallback", "infeasible", "model_invalid"})


def unsolved_share(rows: Sequence[Row]) -> float | None:
    """Share of CP decisions whose model was built but gave no solution (answer by fallback)."""
    built = [r for r in rows if r.variables > 0]
    if not built:
        return None
    return sum(r.status in NO_SOLUTION for r in built) / len(built)


def objective_ratios(rows: Iterable[Row]) -> dict[tuple[str, str], list[float]]:
    """Per (set, label): model objective / the lowest among CP decisions on the same instance
    whose models considered exactly the same jobs (only where two or more did); 1 = best."""
    out: dict[tuple[str, str], list[float]] = defaultdict(list)
    for (set_name, _), labels in by_instance(rows).items():
        groups: dict[str, list[Row]] = defaultdict(list)
        for row in labels.values():
            if row.objective is not None and row.considered > 0:
                groups[row.considered_key].append(row)
        for group in groups.values():
            best = min(r.objective for r in group if r.objective is not None)
            if len(group) < 2 or best <= 0:
                continue
            for row in group:
                assert row.objective is not None
                out[(set_name, row.label)].append(row.objective / best)
    return out


def pooled(per_set: dict[str, list[float]]) -> list[float]:
    return [x for values in per_set.values() for x in values]


@dataclass(frozen=True, slots=True)
class TargetCheck:
    dispatcher: str
    ratio: Spread | None  # per-instance decision-time ratio to EASY, all sets together
    per_set: dict[str, Spread | None]
    wall: Spread | None  # the same on client round trips
    built: Spread | None  # the same on the instances where its model was built

    def verdict(self) -> str:
        if self.ratio is None:
            return "no instance measured"
        m = self.ratio.median
        if m <= TARGET_VS_EASY:
            return (f"**met**: {m:.2f}× EASY, {TARGET_VS_EASY / m:.1f}× below the "
                    f"{TARGET_VS_EASY:.0f}× limit")
        return (f"**missed**: {m:.2f}× EASY, {m / TARGET_VS_EASY:.1f}× above the "
                f"{TARGET_VS_EASY:.0f}× limit")


def target_check(rows: Sequence[Row], dispatcher: str) -> TargetCheck:
    ratios = paired_ratios(rows, dispatcher, "easy", decision_ms)
    walls = paired_ratios(rows, dispatcher, "easy", wall_ms)
    built_keys = {(r.set, r.instance) for r in rows if r.label == dispatcher and r.variables > 0}
    built = paired_ratios([r for r in rows if (r.set, r.instance) in built_keys], dispatcher,
                          "easy", decision_ms)
    return TargetCheck(dispatcher, spread(pooled(ratios)),
                       {name: spread(values) for name, values in ratios.items()},
                       spread(pooled(walls)), spread(pooled(built)))


def _cell(s: Spread | None, digits: int = 2) -> str:
    return "–" if s is None else s.fmt(digits)


def _set_order(rows: Sequence[Row]) -> list[str]:
    return list(dict.fromkeys(r.set for r in rows))


def markdown(rows: Sequence[Row], default: str, command: str,
             notes: Sequence[str] = ()) -> str:
    """The summary tables (per set, per dispatcher) and the target check."""
    sets = _set_order(rows)
    var_ratio = paired_ratios(rows, "pcp20", "pcp19", variables)
    time_ratio = paired_ratios(rows, "pcp20", "pcp19", decision_ms)
    vs_easy = {name: paired_ratios(rows, name, "easy", decision_ms) for name in CP_DISPATCHERS}
    lines = [
        "### Same instances, every dispatcher", "",
        f"Command: `{command}`", "",
        *(f"- {note}" for note in notes), *([""] if notes else []),
        "Ratios are per instance (same instance, same run), shown as median [p10–p90] over "
        "the instances of a set; time is the service's decision time. Variable ratios compare "
        "the models each dispatcher searches, built in-process where the service answered "
        "without one because every considered job starts now "
        "(benchmarks/same_instances/model_size.py); n = "
        "instances where both have a model.", "",
        "| set | system | nodes | instances | queued p50 [max] | variables PCP'20 / PCP'19 "
        "(n) | share < 0.1 | time PCP'20 / PCP'19 | HCP'19 / EASY | PCP'19 / EASY "
        "| PCP'20 / EASY |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    instances = by_instance(rows)
    for name in sets:
        first = [labels for (s, _), labels in instances.items() if s == name]
        some = next(iter(first[0].values()))
        queued = [next(iter(labels.values())).queued for labels in first]
        v = var_ratio.get(name, [])
        share = f"{sum(x < 0.1 for x in v) / len(v):.0%}" if v else "–"
        lines.append(
            f"| {name} | {some.system} | {some.nodes} | {len(first)} "
            f"| {statistics.median(queued):.0f} [{max(queued)}] "
            f"| {_cell(spread(v), 3)} ({len(v)}) | {share} "
            f"| {_cell(spread(time_ratio.get(name, [])))} "
            + "".join(f"| {_cell(spread(vs_easy[d].get(name, [])), 1)} " for d in CP_DISPATCHERS)
            + "|"
        )
    quality = quality_ratios(rows)
    objective = objective_ratios(rows)
    lines += [
        "", "Per dispatcher. *Σ priority / best*: Σ (t − q_i + d_i) / d_i over the jobs the "
        "decision starts now, divided by the largest any dispatcher reached on the instance "
        "(mean over the n instances where some dispatcher starts a job; *at best* = share of "
        "them where it is the largest). Starting more now is not always better: jobs held "
        "back for a reserved head job count against a decision. *Objective / best CP*: "
        "model total slowdown over the lowest among CP decisions whose models considered the "
        "same jobs (median [p10–p90], n instances). *No solution*: share of the built models "
        "for which every attempt ended without a solution (the heuristic answered).", "",
        "| set | dispatcher | decision ms p50 | p90 | max | variables p50 | no solution "
        "| started jobs (mean) | Σ priority / best (mean, n) | at best | objective / best CP "
        "(n) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in sets:
        labels = list(dict.fromkeys(r.label for r in rows if r.set == name))
        for label in labels:
            mine = [r for r in rows if r.set == name and r.label == label]
            ms = [r.decision_ms for r in mine]
            q = quality.get((name, label), [])
            obj = objective.get((name, label), [])
            unsolved = unsolved_share(mine)
            lines.append(
                f"| {name} | {label} | {statistics.median(ms):.1f} | {quantile(ms, 0.9):.1f} "
                f"| {max(ms):.1f} | {statistics.median(r.variables for r in mine):.0f} "
                f"| {'–' if unsolved is None else f'{unsolved:.0%}'} "
                f"| {statistics.mean(r.started_jobs for r in mine):.2f} "
                + (f"| {statistics.mean(q):.3f} ({len(q)}) "
                   f"| {sum(x >= AT_BEST for x in q) / len(q):.0%} " if q else "| – (0) | – ")
                + f"| {_cell(spread(obj), 3) if obj else '–'} ({len(obj)}) |"
            )
    check = target_check(rows, default)
    lines += ["", f"**Target** — default CP dispatcher ({default}) within "
              f"{TARGET_VS_EASY:.0f}× of EASY's decision time, median of the per-instance "
              f"ratio over all {check.ratio.n if check.ratio else 0} instances: "
              f"{check.verdict()}. p10–p90 {_cell(check.ratio)}; per set: "
              + ", ".join(f"{k} {_cell(v)}" for k, v in check.per_set.items())
              + f"; on client round trips (gRPC included) {_cell(check.wall)}; only where "
              f"its model was built (n = {check.built.n if check.built else 0}) "
              f"{_cell(check.built)}."]
    return "\n".join(lines) + "\n"


def plot(rows: Sequence[Row], out_dir: Path, prefix: str = "same_instances") -> list[Path]:
    """CDFs of the PCP'20 / PCP'19 ratios (Figures 6-7), boxplots of the decision time against
    EASY and of decision quality; returns the PNG paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sets = _set_order(rows)
    paths = []
    for what, value, title, mark in (
        ("variables", variables, "decision variables, PCP'20 / PCP'19 (cf. Figure 6)", 0.1),
        ("time", decision_ms, "decision time, PCP'20 / PCP'19 (cf. Figure 7)", 1.0),
    ):
        ratios = paired_ratios(rows, "pcp20", "pcp19", value)
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        for name in sets:
            data = sorted(ratios.get(name, []))
            if data:
                ax.step(data, [(i + 1) / len(data) for i in range(len(data))], where="post",
                        label=f"{name} (n={len(data)})")
        ax.axvline(mark, color="grey", linestyle=":")
        ax.set_xscale("log")
        ax.set_xlabel("ratio per instance (log)")
        ax.set_ylabel("share of instances ≤ x")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        paths.append(_save(fig, out_dir / f"{prefix}_{what}.png"))
    vs_easy = {d: paired_ratios(rows, d, "easy", decision_ms) for d in CP_DISPATCHERS}
    paths.append(_boxes(
        sets, out_dir / f"{prefix}_vs_easy.png", "decision time / EASY's (log)",
        {(s, d): vs_easy[d].get(s, []) for s in sets for d in CP_DISPATCHERS},
        list(CP_DISPATCHERS), log=True, line=TARGET_VS_EASY))
    labels = list(dict.fromkeys(r.label for r in rows))
    paths.append(_boxes(sets, out_dir / f"{prefix}_quality.png",
                        "Σ priority of started jobs / best", quality_ratios(rows), labels,
                        log=False, line=1.0))
    return paths


def _boxes(sets: list[str], path: Path, ylabel: str, data: dict[tuple[str, str], list[float]],
           labels: list[str], log: bool, line: float) -> Path:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(sets), figsize=(3.2 * len(sets), 3.8), sharey=True,
                             squeeze=False)
    for ax, name in zip(axes[0], sets, strict=True):
        present = [lab for lab in labels if data.get((name, lab))]
        ax.boxplot([data[(name, lab)] for lab in present], tick_labels=present)
        ax.axhline(line, color="grey", linestyle=":")
        if log:
            ax.set_yscale("log")
        ax.set_title(name, fontsize=9)
        ax.tick_params(axis="x", labelrotation=45, labelsize=7)
        ax.grid(alpha=0.3, axis="y")
    axes[0][0].set_ylabel(ylabel)
    return _save(fig, path)


def _save(fig: Figure, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
