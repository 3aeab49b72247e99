"""`qos` against the book's default rung, pair by pair, from the committed campaigns (issue #49:
is `qos` retired with the other profiles the book supersedes, or does it still win something?).

    python -m benchmarks.qos.modes [--out benchmarks/results/qos/modes.md]

Reads `benchmarks/results/qos/book.json` (issue #34's judged campaign: `pcp20@qos`, the server's
default then, beside EASY in the same replays) and `benchmarks/results/qos/ladder/frontier.json`
(issue #41's ladder: the book's 24 h rung, the `book` profile's, beside EASY); no replay is run.
Per pair: mean bounded slowdown, longest wait and utilisation (over the makespan) of each, and
the decision time's p50 as a ratio to EASY's in its own campaign (the two campaigns ran on
different days, so only ratios to EASY are compared across them).
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "qos"
BOOK_CAMPAIGN = RESULTS / "book.json"
LADDER = RESULTS / "ladder" / "frontier.json"
UTILISATION_SLACK = 0.005  # issue #24's "EASY's utilisation": at most this much lower


@dataclass(frozen=True, slots=True)
class Pair:
    """One (case, predictor): the figures of `qos`, of the book's 24 h rung and of EASY."""

    case: str
    predictor: str
    qos: dict[str, Any]
    book: dict[str, Any]
    easy_of_qos: dict[str, Any]  # EASY in qos's campaign
    easy_of_book: dict[str, Any]  # EASY in the ladder's campaign


def pairs(book_campaign: dict[str, Any], ladder: dict[str, Any]) -> list[Pair]:
    """The pairs both campaigns replayed, in the ladder's order."""
    runs: dict[tuple[str, str], dict[str, Any]] = {}
    for row in book_campaign["rows"]:  # a row per candidate; each holds the default's run
        if "default" in row["runs"]:
            runs.setdefault((row["case"], row["predictor"]), row["runs"])
    out = []
    for pair in ladder["pairs"]:
        key = (pair["case"], pair["predictor"])
        if key in runs:
            out.append(Pair(key[0], key[1], runs[key]["default"], pair["rungs"]["24h"],
                            runs[key]["easy"], pair["rules"]["easy"]))
    return out


def keeps_easys_promises(run: dict[str, Any], easy: dict[str, Any]) -> bool:
    """Issue #24's promises: a longest wait no longer than EASY's, utilisation within 0.005."""
    return run["max_wait"] <= easy["max_wait"] and run["util"] >= easy["util"] - UTILISATION_SLACK


def table(found: list[Pair]) -> str:
    lines = [
        "| pair | mean bsld qos / book | longest wait [h] EASY / qos / book | "
        "utilisation EASY / qos / book | decision p50 ÷ EASY's: qos / book |",
        "|---|---|---|---|---|",
    ]
    for p in found:
        lines.append(
            f"| {p.case}, {p.predictor} | {p.qos['bsld']:.2f} / {p.book['bsld']:.2f} | "
            f"{p.easy_of_qos['max_wait'] / 3600:.1f} / {p.qos['max_wait'] / 3600:.1f} / "
            f"{p.book['max_wait'] / 3600:.1f} | {p.easy_of_qos['util']:.3f} / "
            f"{p.qos['util']:.3f} / {p.book['util']:.3f} | "
            f"{p.qos['decision_p50'] / p.easy_of_qos['decision_p50']:.1f}× / "
            f"{p.book['decision_p50'] / p.easy_of_book['decision_p50']:.1f}× |")
    return "\n".join(lines)


def summary(found: list[Pair]) -> list[str]:
    n = len(found)
    bsld = [p.qos["bsld"] / p.book["bsld"] for p in found]
    longer = [(p.qos["max_wait"] - p.book["max_wait"]) / 3600 for p in found]
    util = [p.qos["util"] - p.book["util"] for p in found]
    qos_cost = [p.qos["decision_p50"] / p.easy_of_qos["decision_p50"] for p in found]
    book_cost = [p.book["decision_p50"] / p.easy_of_book["decision_p50"] for p in found]
    return [
        f"- mean bounded slowdown: `qos` lower than the book's on **{sum(r < 1 for r in bsld)} "
        f"of {n}** pairs (qos ÷ book: median {statistics.median(bsld):.2f}, "
        f"{min(bsld):.2f} to {max(bsld):.2f});",
        f"- longest wait: `qos` longer than the book's on **{sum(d > 0 for d in longer)} of "
        f"{n}** (by up to {max(longer):.1f} h); `qos` keeps EASY's promises (longest wait, "
        f"utilisation within {UTILISATION_SLACK}) on "
        f"**{sum(keeps_easys_promises(p.qos, p.easy_of_qos) for p in found)} of {n}**, the "
        f"book on **{sum(keeps_easys_promises(p.book, p.easy_of_book) for p in found)} of "
        f"{n}**;",
        f"- utilisation: `qos` more than {UTILISATION_SLACK} below the book's on "
        f"**{sum(u < -UTILISATION_SLACK for u in util)} of {n}** (by up to {-min(util):.3f});",
        f"- decision time p50 ÷ EASY's in the same campaign: `qos` median "
        f"{statistics.median(qos_cost):.1f}× (up to {max(qos_cost):.1f}×), the book median "
        f"{statistics.median(book_cost):.1f}× (up to {max(book_cost):.1f}×).",
    ]


def report(book_campaign: dict[str, Any], ladder: dict[str, Any]) -> str:
    found = pairs(book_campaign, ladder)
    return "\n".join([
        "# `qos` against the book's default rung (issue #49)", "",
        "`python -m benchmarks.qos.modes --out benchmarks/results/qos/modes.md`, from "
        "`book.json` (`pcp20@qos`, issue #34's campaign) and `ladder/frontier.json` (`pcp20` "
        "`book`, 24 h rung, issue #41's); no replay. Utilisation over the makespan.", "",
        *summary(found), "", table(found), "",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write the Markdown here (default: stdout)")
    args = parser.parse_args(argv)
    text = report(json.loads(BOOK_CAMPAIGN.read_text()), json.loads(LADDER.read_text()))
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
