"""The verdicts of `benchmarks.qos.verdicts` as `qos.md` (summary lines, one section per case
with issue #13's table, issue #24's table, the frontier and its plot) and `qos.json`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from benchmarks.qos.cases import CASES, DEFAULT, ISSUE13_BASELINES, ISSUE_PAIRS, REFERENCE, Case
from benchmarks.qos.verdicts import (
    BEST_KEEPING_PAIRS,
    ISSUE13_TARGETS,
    ISSUE24_TARGETS,
    MET,
    MISSED,
    NOT_MEASURED,
    TARGETS,
    Figures,
    Judged,
    Row,
    Verdict,
    frontier,
    frontiers,
)

NONE = "–"


def _overall(target: str, count: dict[str, int], total: int, partial: int) -> str:
    if count[NOT_MEASURED] == total:
        return "NOT MEASURED"
    if target == "best-keeping":  # a count over the issue's pairs, not every pair
        if count[MET] >= BEST_KEEPING_PAIRS:
            return "MET"
        return "MISSED" if count[MISSED] > ISSUE_PAIRS - BEST_KEEPING_PAIRS else "NOT DECIDED"
    if count[MISSED]:
        return "MISSED"
    return "MET where measured" if count[NOT_MEASURED] or partial else "MET"


def _keepers_note(judged: Judged) -> str:
    """How often EASY's own run is the lowest mean that keeps both, and how often it is the
    only run that does."""
    found = frontiers(judged.rows)
    easy_best = sum(f.best_keeping is not None and f.best_keeping[0] == REFERENCE
                    for _, f in found)
    only = [f"{case}/{f.predictor}" for case, f in found
            if [name for name, _, lost in f.runs if not lost] == [REFERENCE]]
    return (f"; EASY's own run is the lowest keeping both in {easy_best}, the only run keeping "
            f"both in {len(only)}" + (f" ({', '.join(only)})" if only else ""))


def summary_lines(judged: Judged, targets: Sequence[str] = tuple(TARGETS)) -> list[str]:
    """One line per target over the default's rows: met, missed, not measured, partial."""
    lines = []
    for target in targets:
        found = [(r, v) for r in judged.rows if r.cp == DEFAULT for v in r.verdicts
                 if v.target == target]
        if not found:
            continue
        verdicts = [v for _, v in found]
        count = {s: sum(v.status == s for v in verdicts) for s in (MET, MISSED, NOT_MEASURED)}
        partial = sum(bool(v.partial) and v.status != NOT_MEASURED for v in verdicts)
        where = [f"{r.case}/{r.predictor}" for r, v in found if v.status == MISSED]
        line = (f"- {TARGETS[target]}: **{_overall(target, count, len(verdicts), partial)}** — "
                f"met {count[MET]}, missed {count[MISSED]}, not measured "
                f"{count[NOT_MEASURED]} of {len(verdicts)} (case, predictor)")
        line += f"; {partial} of the measured from partial runs" if partial else ""
        if target == "best-keeping":
            line += _keepers_note(judged)
        lines.append(line + (f"; missed on {', '.join(where)}" if where else ""))
    return lines


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def _fmt_bsld(f: Figures | None) -> str:
    if f is None or f.bsld is None:
        return NONE
    return f"{f.bsld:.2f}" + (f" ± {f.bsld_std:.2f}" if f.bsld_std is not None else "")


def _fmt_util(f: Figures | None) -> str:
    if f is None or f.util is None:
        return NONE
    return f"{f.util:.3f}" + (f" ± {f.util_std:.3f}" if f.sequences and f.util_std else "")


def _hours(seconds: float | None) -> str:
    if seconds is None:
        return NONE
    hours = seconds / 3600
    return f"{hours:.1f}" if hours >= 10 else f"{hours:.2f}"


def _fmt_ms(f: Figures | None) -> str:
    return NONE if f is None or f.decision_p50 is None else f"{f.decision_p50 * 1000:.1f}"


def _pair(mine: Figures | None, easy: Figures | None, attr: str) -> str:
    """'CP / EASY' hours of wait figure `attr` (max_wait, wait_p95, wait_p99)."""
    def one(f: Figures | None) -> str:
        return _hours(getattr(f, attr)) if f is not None else NONE
    return f"{one(mine)} / {one(easy)}"


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def case_table(rows: Sequence[Row], case: Case) -> list[str]:
    """Issue #13's table: its six baselines' means and the default's verdicts."""
    baselines = [b for b in rows[0].baselines if b in ISSUE13_BASELINES]
    targets = ["rlscheduler", "decision"] if case.rlscheduler else [
        "bsld", "util", "max-wait", "decision"]
    head = (["predictor", "CP run", *baselines, "best baseline", "CP bsld (vs best)",
             "util CP / EASY", "max wait [h] CP / EASY", "dec p50 [ms] CP / EASY (ratio)"]
            + [f"target: {t}" for t in targets])
    lines = [_row(head), "|" + "---|" * len(head)]
    for r in rows:
        easy = r.baselines.get(REFERENCE)
        best = r.baselines.get(r.best) if r.best else None
        vs = ""
        if r.mine and r.mine.bsld is not None and best and best.bsld:
            vs = f" ({_pct(r.mine.bsld / best.bsld - 1)})"
        ratio = ""
        if r.mine and r.mine.decision_p50 and easy and easy.decision_p50:
            ratio = f" ({r.mine.decision_p50 / easy.decision_p50:.2f}×)"
        by_target = {v.target: v for v in r.verdicts}
        lines.append(_row([
            r.predictor, r.cp_label, *(_fmt_bsld(r.baselines[b]) for b in baselines),
            f"{r.best} {_fmt_bsld(best)}" if r.best else NONE, _fmt_bsld(r.mine) + vs,
            f"{_fmt_util(r.mine)} / {_fmt_util(easy)}", _pair(r.mine, easy, "max_wait"),
            f"{_fmt_ms(r.mine)} / {_fmt_ms(easy)}{ratio}",
            *(by_target[t].text() for t in targets)]))
    return lines


def promises_table(rows: Sequence[Row], case: Case) -> list[str]:
    """Issue #24's table: EASY's promises and the tails of the wait, the best mean among the
    runs that keep both promises, and the default's verdicts."""
    targets = [t for t in ISSUE24_TARGETS if t != "decision" and (
        case.moderate or t != "moderate")]
    head = ["predictor", "CP run", "util CP / EASY", "longest wait [h] CP / EASY",
            "p95 wait [h] CP / EASY", "p99 wait [h] CP / EASY", "best mean keeping both",
            "CP bsld (vs EASY)", *(f"target: {t}" for t in targets)]
    lines = [_row(head), "|" + "---|" * len(head)]
    for r in rows:
        easy = r.baselines.get(REFERENCE)
        f = frontier(rows, r.predictor)
        best = f.best_keeping if f else None
        vs = ""
        if r.mine and r.mine.bsld is not None and easy and easy.bsld:
            vs = f" ({_pct(r.mine.bsld / easy.bsld - 1)})"
        by_target: dict[str, Verdict] = {v.target: v for v in r.verdicts}
        lines.append(_row([
            r.predictor, r.cp_label, f"{_fmt_util(r.mine)} / {_fmt_util(easy)}",
            _pair(r.mine, easy, "max_wait"), _pair(r.mine, easy, "wait_p95"),
            _pair(r.mine, easy, "wait_p99"), f"{best[0]} {best[1]:.2f}" if best else NONE,
            _fmt_bsld(r.mine) + vs, *(by_target[t].text() for t in targets)]))
    return lines


def frontier_lines(rows: Sequence[Row]) -> list[str]:
    """The frontiers of one case's rows as a table."""
    found = [f for _, f in frontiers(rows)]
    if not found:
        return []
    lines = ["Every run against EASY's promises (utilisation ≥ EASY's − 0.005, longest wait "
             "≤ EASY's), lowest mean bounded slowdown first; what a run gives up is in "
             "brackets:", "",
             "| predictor | lowest mean keeping both | runs |", "|---|---|---|"]
    for f in found:
        runs = "; ".join(f"{name} {bsld:.2f}" + (f" ({', '.join(lost)})" if lost else "")
                         for name, bsld, lost in f.runs)
        best = f"{f.best_keeping[0]} {f.best_keeping[1]:.2f}" if f.best_keeping else NONE
        lines.append(f"| {f.predictor} | {best} | {runs} |")
    return lines


def markdown(judged: Judged, cases: Sequence[Case], header: Sequence[str] = (),
             plots: Mapping[str, str] = {}) -> str:
    """`qos.md`; `plots`: case key -> its frontier plot's file name (next to qos.md)."""
    lines = ["# Issue #13's and #24's targets", "", *header]
    lines += [f"Default CP dispatcher judged: **{judged.default}** (dispatcher@profile the "
              "runs that asked for the server's default resolved to; for runs that did not, "
              "the one given by --default or this checkout's default).", "",
              "## Summary: issue #13's targets (default CP dispatcher)", "",
              *summary_lines(judged, ISSUE13_TARGETS), "",
              "## Summary: issue #24's targets (keep EASY's promises and still beat its mean)",
              "", *summary_lines(judged, ISSUE24_TARGETS), ""]
    for case in cases:
        rows = [r for r in judged.rows if r.case == case.key]
        if not rows:
            continue
        ran = [f for r in rows for f in (r.mine, *r.baselines.values()) if f is not None]
        search = sorted({"deterministic" if f.deterministic else "wall-clock" for f in ran
                         if f.dispatcher not in ("fcfs", "easy") and f.deterministic is not None})
        lines += [f"## {case.key}: {case.title}", ""]
        if not ran:
            lines += ["not measured", ""]
        notes = ["bsld = mean bounded slowdown (10 s)"]
        if case.rlscheduler:
            notes.append("mean ± sample std over the sequences; max wait over all sequences; "
                         "dec p50 = mean of the sequences' p50")
        if search:
            notes.append(f"CP search limits: {', '.join(search)}")
        lines += ["; ".join(notes) + ".", "", "Issue #13:", "", *case_table(rows, case), "",
                  "Issue #24 (p95 / p99 waits: – where the runs' summaries lack them):", "",
                  *promises_table(rows, case), ""]
        if case.key in plots:
            lines += [f"![{case.key}: mean bounded slowdown against longest wait]"
                      f"({plots[case.key]})", ""]
        if ran:
            lines += [*frontier_lines(rows), ""]
    if judged.unmatched:
        lines += ["Runs that are none of the cases (another trace, system, workload rule or "
                  f"selection), ignored: {len(judged.unmatched)}", ""]
    if judged.duplicates:
        lines += ["Duplicate runs, ignored: " + ", ".join(judged.duplicates), ""]
    return "\n".join(lines)


def document(judged: Judged, meta: dict[str, Any]) -> dict[str, Any]:
    """What `qos.json` holds."""
    return {
        **meta, "default": judged.default, "targets": TARGETS,
        "summary": summary_lines(judged),
        "rows": [{"case": r.case, "title": CASES[r.case].title, "predictor": r.predictor,
                  "cp": r.cp, "cp_label": r.cp_label, "best_baseline": r.best,
                  "runs": {k: asdict(f) if f else None
                           for k, f in {**r.baselines, r.cp: r.mine}.items()},
                  "verdicts": [asdict(v) for v in r.verdicts]} for r in judged.rows],
        "frontiers": [{"case": case, "predictor": f.predictor,
                       "best_keeping": f.best_keeping[0] if f.best_keeping else None,
                       "runs": [{"run": n, "bsld": b, "gives_up": lost} for n, b, lost in f.runs]}
                      for case, f in frontiers(judged.rows)],
        "unmatched": judged.unmatched, "duplicates": judged.duplicates,
    }
