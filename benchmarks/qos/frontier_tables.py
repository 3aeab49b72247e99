"""`frontier.md` and `frontier.json` of issue #41's frontier (`benchmarks.qos.frontier`): the
dominance table first, then the default rung's and the decision-time verdicts, then every
pair's runs with their figures and plot."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from benchmarks.qos.ladder_verdicts import (
    RULES,
    Pair,
    Run,
    decision_verdict,
    default_verdict,
    dominance,
    rung_names,
)
from hpcdispatch.server.domain.promise_ladder import DEFAULT_RUNG, LADDER


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _h(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds / 3600:,.1f}"


def _f(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:,.{digits}f}"


def _ms(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1000:,.1f}"


def dominance_lines(pairs: Sequence[Pair], arrival: bool = False) -> list[str]:
    """Pairs × rules: ✓ the dominating rung (its mean against the rule's), ✗ the closest."""
    which = "over the arrival window" if arrival else "over the makespan"
    lines = [f"Utilisation {which}: ✓ a rung with a longest wait no longer, utilisation at "
             "most 0.005 lower and a mean at least 5 % lower; ✗ the closest rung and what it "
             "misses.", "", _row(["pair", *RULES]), _row(["---"] * (len(RULES) + 1))]
    met = total = 0
    for pair in pairs:
        cells = []
        for rule in RULES:
            cell = dominance(pair, rule, arrival)
            if cell is None:
                cells.append("–")
                continue
            total += 1
            met += cell.met
            cells.append(f"✓ {cell.by} ({cell.says})" if cell.met else f"✗ {cell.by}: {cell.says}")
        lines.append(_row([pair.title, *cells]))
    share = f"{met / total:.0%}" if total else "–"
    return [*lines, "", f"**{met} of {total} cells ({share})**, target ≥ 90 %.", ""]


def verdict_lines(pairs: Sequence[Pair]) -> list[str]:
    lines = [_row(["pair", f"default rung ({DEFAULT_RUNG}): keeps EASY's promises",
                   "mean below EASY's", "decision time"]), _row(["---"] * 4)]
    keeps = lower = fast = counted = 0
    for pair in pairs:
        default, decision = default_verdict(pair), decision_verdict(pair)
        if default is not None:
            counted += 1
            keeps += default[0]
            lower += default[1]
        fast += bool(decision and decision[0])
        lines.append(_row([
            pair.title,
            "–" if default is None else f"{'✓' if default[0] else '✗'} {default[2]}",
            "–" if default is None else ("✓" if default[1] else "✗"),
            "–" if decision is None else f"{'✓' if decision[0] else '✗'} {decision[1]}"]))
    return [*lines, "", f"Default rung: keeps both promises on **{keeps} of {counted}** "
            f"pairs (target 21 / 21), mean below EASY's on **{lower}** (target ≥ 17); "
            f"decision time within its targets on **{fast} of {len(pairs)}**.", ""]


def pair_lines(pair: Pair, plot: str | None) -> list[str]:
    lines = [f"### {pair.title}", "", _row([
        "run", "mean bsld", "p95 wait [h]", "p99 wait [h]", "longest wait [h]",
        "util (makespan)", "util (arrival window)", "decision p50 [ms]", "decision p99 [ms]"]),
        _row(["---"] * 9)]
    runs: list[tuple[str, Run]] = [(n, pair.rules[n]) for n in RULES if n in pair.rules]
    runs += [(f"rung {n}" + (" (default)" if n == DEFAULT_RUNG else ""), pair.rungs[n])
             for n in rung_names() if n in pair.rungs]
    for name, run in runs:
        f = run.figures
        lines.append(_row([name, _f(f.bsld, 2), _h(f.wait_p95), _h(f.wait_p99),
                           _h(f.max_wait), _f(f.util), _f(run.util_arrival),
                           _ms(f.decision_p50), _ms(run.decision_p99)]))
    if plot:
        lines += ["", f"![{pair.title}]({plot})"]
    return [*lines, ""]


def _share(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def promise_lines(pairs: Sequence[Pair]) -> list[str]:
    """Per pair and run that reports starts: the share of promised jobs started no later than
    their first promise (the p95 of the others' lateness), and of estimated jobs."""
    names = ["los", "easy", "conservative", *(n for n in rung_names())]
    lines = ["Share of the promised jobs started no later than their first promise (p95 of the "
             "late ones' lateness, hours); in brackets, the share of the jobs given only "
             "estimates that started no later than their first estimate. EASY, LOS and "
             "conservative promise their reservations; EASY-SJBF's and EASY-LXF's heads can be "
             "overtaken, so they only estimate.", "", _row(["pair", *names]),
             _row(["---"] * (len(names) + 1))]
    for pair in pairs:
        runs = {**pair.rules, **pair.rungs}
        cells = []
        for name in names:
            run = runs.get(name)
            if run is None or (run.promised_on_time is None and run.estimated_on_time is None):
                cells.append("–")
                continue
            late = f" ({_h(run.late_p95)})" if run.late_p95 is not None else ""
            cells.append(f"{_share(run.promised_on_time)}{late} [{_share(run.estimated_on_time)}]")
        lines.append(_row([pair.title, *cells]))
    return [*lines, ""]


def markdown(pairs: Sequence[Pair], header: Sequence[str],
             plots: Mapping[tuple[str, str], str]) -> str:
    ladder = ", ".join(f"{s.name} ({s.says})" for s in LADDER)
    lines = ["# The promise book's ladder against the classical rules (issue #41)", "",
             *header, f"The ladder: {ladder}.", "", "## Dominance", "",
             *dominance_lines(pairs), *dominance_lines(pairs, arrival=True),
             "## The default rung and the decision time", "", *verdict_lines(pairs),
             "## Promises kept (issue #42)", "", *promise_lines(pairs),
             "## Every pair", ""]
    for pair in pairs:
        lines += pair_lines(pair, plots.get((pair.case.key, pair.predictor)))
    return "\n".join(lines)


def document(pairs: Sequence[Pair], meta: dict[str, Any]) -> dict[str, Any]:
    def runs(group: Mapping[str, Run]) -> dict[str, Any]:  # read back by pairs_of_judged
        return {n: {**asdict(r.figures), "util_arrival": r.util_arrival,
                    "decision_p99": r.decision_p99, "promised_jobs": r.promised_jobs,
                    "promised_on_time": r.promised_on_time, "late_p95": r.late_p95,
                    "estimated_on_time": r.estimated_on_time} for n, r in group.items()}

    return {**meta, "pairs": [
        {"case": p.case.key, "predictor": p.predictor, "rules": runs(p.rules),
         "rungs": runs(p.rungs),
         "dominance": {r: asdict(c) for r in RULES if (c := dominance(p, r)) is not None},
         "dominance_arrival_window": {
             r: asdict(c) for r in RULES if (c := dominance(p, r, True)) is not None}}
        for p in pairs]}
