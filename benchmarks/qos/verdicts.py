"""Issues #13's and #24's verdicts from run summaries: per case and predictor, each target met
or missed, and by how much (`benchmarks.qos.tables` writes them as `qos.md` and `qos.json`).

Issue #13's targets of the default CP dispatcher (the server's default dispatcher and profile),
on the same case and predictor as the baselines it is compared with:

- `bsld`: mean bounded slowdown at least 20 % below the best baseline's (lowest mean of
  #13's six baselines that ran);
- `util`: utilisation at least EASY's − 0.005;
- `max-wait`: longest wait no longer than EASY's;
- `rlscheduler` (RLScheduler's protocol only, instead of the three above): mean over the
  sequences of the mean bounded slowdown below 58.64, its learned policy;
- `decision`: median decision time within 10× of EASY's. Here it is the ratio of the runs'
  p50 (for sequences: the mean of the per-sequence p50s); the decisions of two replays differ
  after the first, so these are the same trace and machine, not identical snapshots
  (`benchmarks.same_instances` measures that).

Issue #24's targets ("keep EASY's promises and still beat its mean"), same case and predictor:

- `promises`: utilisation ≥ EASY's − 0.005 and longest wait ≤ EASY's (both of EASY's promises);
- `best-keeping`: among all runs that keep both promises (EASY's own run always does), the
  default has the lowest mean bounded slowdown; the issue asks for ≥ 17 of its 21 pairs;
- `moderate` (moderately loaded cases only: KTH-SP2, LLNL-Atlas stretch, KIT preset): mean
  bounded slowdown at least 20 % below EASY's;
- `decision`, as above.

Each case's *frontier* (`frontier`): every run of a predictor, lowest mean first, with what
it gives up against EASY's promises, and the lowest mean among the runs that give up neither.

A verdict is "met", "missed" or "not measured" (no run of the default, or of what it is
compared with); a verdict from a partial run (`--limit-jobs`, fewer sequences, baselines
missing) says so and counts apart.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from benchmarks.qos.cases import (
    BASELINES,
    CASES,
    DEFAULT,
    ISSUE13_BASELINES,
    ISSUE_PAIRS,
    REFERENCE,
    RLSCHEDULER_POLICY,
    Case,
    case_of,
    run_key,
)

BSLD_TARGET = -0.20
MODERATE_TARGET = -0.20  # issue #24: mean vs EASY's on the moderately loaded cases
BEST_KEEPING_PAIRS = 17  # issue #24: lowest mean among the promise keepers in ≥ 17 of 21
UTIL_TOLERANCE = 0.005
DECISION_FACTOR = 10.0
MET, MISSED, NOT_MEASURED = "met", "missed", "not measured"
TARGETS = {
    "bsld": "mean bounded slowdown ≥ 20 % below the best baseline",
    "util": "utilisation ≥ EASY's − 0.005",
    "max-wait": "longest wait ≤ EASY's",
    "rlscheduler": f"RLScheduler's Lublin-1: mean bounded slowdown < {RLSCHEDULER_POLICY}",
    "decision": "decision time p50 within 10× of EASY's",
    "promises": "keeps EASY's promises: utilisation ≥ EASY's − 0.005 and longest wait ≤ EASY's",
    "best-keeping": "lowest mean bounded slowdown among all runs that keep both promises "
                    f"(in ≥ {BEST_KEEPING_PAIRS} of the issue's {ISSUE_PAIRS} pairs)",
    "moderate": "moderately loaded pairs (KTH-SP2, LLNL-Atlas stretch, KIT): mean bounded "
                "slowdown ≥ 20 % below EASY's",
}
ISSUE13_TARGETS = ("bsld", "util", "max-wait", "rlscheduler", "decision")
ISSUE24_TARGETS = ("promises", "best-keeping", "moderate", "decision")


@dataclass(slots=True)
class Figures:
    """What the tables show of one run (or one cell's sequences)."""

    key: str  # run_key: a baseline, DEFAULT or dispatcher@profile
    dispatcher: str
    profile: str
    bsld: float | None
    bsld_std: float | None  # over sequences (RLScheduler), else None
    util: float | None
    util_std: float | None
    max_wait: float | None  # seconds
    decision_p50: float | None  # seconds
    jobs: int
    limit_jobs: int | None
    sequences: int | None
    sequence_length: int | None
    seed: int | None
    deterministic: bool | None
    source: str
    wait_p95: float | None = None  # seconds; None where the summary has no percentiles
    wait_p99: float | None = None


@dataclass(slots=True)
class Verdict:
    target: str
    status: str
    value: str = ""
    reference: str = ""
    margin: str = ""  # "by how much": met by / missed by
    partial: list[str] = field(default_factory=list)

    def text(self) -> str:
        if self.status == NOT_MEASURED:
            return "not measured"
        word = "**MET**" if self.status == MET else "**MISSED**"
        text = f"{word} {self.margin}".strip()
        return text + (f" (partial: {'; '.join(self.partial)})" if self.partial else "")


@dataclass(slots=True)
class Row:
    """One case, predictor and CP run (the default, or a candidate) with its verdicts."""

    case: str
    predictor: str
    cp: str  # DEFAULT or dispatcher@profile
    cp_label: str  # as shown: "default (pcp20@fast)"
    baselines: dict[str, Figures | None]
    best: str | None  # the baseline with the lowest mean bounded slowdown
    mine: Figures | None
    verdicts: list[Verdict]


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return None if math.isnan(float(value)) else float(value)
    return None


def figures(summary: dict[str, Any], source: str = "") -> Figures:
    seq = summary.get("sequences") or {}
    runs = seq.get("runs") or []
    utils = [u for u in (_number(r.get("utilisation")) for r in runs) if u is not None]
    return Figures(
        key=run_key(summary), dispatcher=str(summary.get("dispatcher", "?")),
        profile=str(summary.get("profile") or ""),
        bsld=_number((summary.get("bounded_slowdown") or {}).get("mean")),
        bsld_std=_number((summary.get("bounded_slowdown") or {}).get("std")) if seq else None,
        util=_number(summary.get("utilisation")),
        util_std=statistics.stdev(utils) if len(utils) > 1 else (0.0 if utils else None),
        max_wait=_number((summary.get("wait_seconds") or {}).get("max")),
        decision_p50=_number((summary.get("decision_seconds") or {}).get("p50")),
        jobs=int(summary.get("jobs") or 0), limit_jobs=summary.get("limit_jobs"),
        sequences=seq.get("count") if seq else None,
        sequence_length=seq.get("length") if seq else None,
        seed=seq.get("seed") if seq else None,
        deterministic=summary.get("deterministic_search"), source=source,
        wait_p95=_number((summary.get("wait_seconds") or {}).get("p95")),
        wait_p99=_number((summary.get("wait_seconds") or {}).get("p99")),
    )


def figures_of_judged(stored: dict[str, Any]) -> Figures:
    """A run's figures as a judged `qos.json` stores them (fields it lacks: None)."""
    known = {f.name for f in fields(Figures)}
    values: dict[str, Any] = dict.fromkeys(known)
    values.update({k: v for k, v in stored.items() if k in known})
    return Figures(**values)


def _partial(case: Case, runs: Iterable[Figures | None]) -> list[str]:
    """Why these runs are only part of the case as the issue sets it."""
    case = CASES.get(case.key, case)  # the issue's protocol, not a quicker variant of it
    notes: list[str] = []
    for f in runs:
        if f is None:
            continue
        if f.limit_jobs is not None and f"first {f.limit_jobs:,} jobs" not in notes:
            notes.append(f"first {f.limit_jobs:,} jobs")
        if case.rlscheduler and (f.sequences, f.sequence_length, f.seed) != (
                case.sequences, case.sequence_length, case.seed):
            note = f"{f.sequences} sequences of {f.sequence_length} jobs, seed {f.seed}"
            if note not in notes:
                notes.append(note)
    return notes


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def bsld_verdict(mine: Figures | None, baselines: dict[str, Figures | None],
                 partial: list[str]) -> tuple[Verdict, str | None]:
    ran = {k: f for k, f in baselines.items()
           if k in ISSUE13_BASELINES and f is not None and f.bsld is not None}
    best = min(ran, key=lambda k: ran[k].bsld or 0.0) if ran else None
    if mine is None or mine.bsld is None or best is None:
        return Verdict("bsld", NOT_MEASURED), best
    best_bsld = ran[best].bsld or 0.0
    missing = [b for b in ISSUE13_BASELINES if b not in ran]  # the best of #13's six
    notes = partial + ([f"baselines not run: {', '.join(missing)}"] if missing else [])
    change = mine.bsld / best_bsld - 1 if best_bsld else math.inf
    v = Verdict("bsld", MET, f"{mine.bsld:.2f} ({_pct(change)})",
                f"best baseline {best} {best_bsld:.2f}", partial=notes)
    if best_bsld * (1 + BSLD_TARGET) < 1:
        v.status = MISSED
        v.margin = (f"not reachable: bounded slowdown is ≥ 1 and the best baseline's is "
                    f"{best_bsld:.2f}")
    elif change <= BSLD_TARGET:
        v.margin = f"by {(BSLD_TARGET - change) * 100:.1f} points ({_pct(change)} vs best)"
    else:
        v.status = MISSED
        v.margin = (f"by {(change - BSLD_TARGET) * 100:.1f} points ({_pct(change)} vs best "
                    f"{best}, target ≤ −20 %)")
    return v, best


def util_verdict(mine: Figures | None, easy: Figures | None, partial: list[str]) -> Verdict:
    if mine is None or easy is None or mine.util is None or easy.util is None:
        return Verdict("util", NOT_MEASURED)
    margin = mine.util - (easy.util - UTIL_TOLERANCE)
    v = Verdict("util", MET if margin >= 0 else MISSED, f"{mine.util:.3f}",
                f"EASY {easy.util:.3f}", partial=list(partial))
    v.margin = (f"by {margin:.3f}" if margin >= 0 else
                f"by {-margin:.3f} ({mine.util - easy.util:+.3f} vs EASY, allowed −0.005)")
    return v


def wait_verdict(mine: Figures | None, easy: Figures | None, partial: list[str]) -> Verdict:
    if mine is None or easy is None or mine.max_wait is None or easy.max_wait is None:
        return Verdict("max-wait", NOT_MEASURED)
    diff = mine.max_wait - easy.max_wait
    v = Verdict("max-wait", MET if diff <= 0 else MISSED, f"{mine.max_wait / 3600:.1f} h",
                f"EASY {easy.max_wait / 3600:.1f} h", partial=list(partial))
    rel = f", {diff / easy.max_wait * 100:+.0f} %" if easy.max_wait > 0 else ""
    v.margin = f"by {abs(diff) / 3600:.1f} h{rel}"
    return v


def rl_verdict(mine: Figures | None, partial: list[str]) -> Verdict:
    if mine is None or mine.bsld is None:
        return Verdict("rlscheduler", NOT_MEASURED)
    diff = mine.bsld - RLSCHEDULER_POLICY
    v = Verdict("rlscheduler", MET if diff < 0 else MISSED,
                f"{mine.bsld:.2f} ± {mine.bsld_std or 0.0:.2f}",
                f"RLScheduler's policy {RLSCHEDULER_POLICY}", partial=list(partial))
    v.margin = f"by {abs(diff):.2f} ({diff / RLSCHEDULER_POLICY * 100:+.1f} %)"
    return v


def decision_verdict(mine: Figures | None, easy: Figures | None,
                     partial: list[str]) -> Verdict:
    if (mine is None or easy is None or mine.decision_p50 is None or not easy.decision_p50):
        return Verdict("decision", NOT_MEASURED)
    r = mine.decision_p50 / easy.decision_p50
    v = Verdict("decision", MET if r <= DECISION_FACTOR else MISSED, f"{r:.2f}×",
                f"EASY p50 {easy.decision_p50 * 1000:.1f} ms", partial=list(partial))
    v.margin = (f"({r:.2f}× ≤ 10×)" if r <= DECISION_FACTOR
                else f"by {r / DECISION_FACTOR:.1f}× ({r:.1f}× EASY)")
    return v


def gives_up(f: Figures, easy: Figures) -> list[str]:
    """What run `f` gives up against EASY's run: [] when its utilisation is at least EASY's −
    0.005 and its longest wait no longer (EASY's two promises), else each shortfall."""
    lost = []
    if f.util is not None and easy.util is not None and f.util < easy.util - UTIL_TOLERANCE:
        lost.append(f"utilisation {f.util - easy.util:+.3f}")
    if f.max_wait is not None and easy.max_wait is not None and f.max_wait > easy.max_wait:
        diff = f.max_wait - easy.max_wait
        lost.append(f"longest wait +{diff / 3600:.1f} h" if diff >= 360 else
                    f"longest wait +{diff:.0f} s")
    return lost


def _measured_promises(f: Figures | None) -> bool:
    return f is not None and f.util is not None and f.max_wait is not None


def promises_verdict(mine: Figures | None, easy: Figures | None,
                     partial: list[str]) -> Verdict:
    if mine is None or easy is None or not (_measured_promises(mine)
                                            and _measured_promises(easy)):
        return Verdict("promises", NOT_MEASURED)
    assert mine.util is not None and mine.max_wait is not None
    assert easy.util is not None and easy.max_wait is not None
    lost = gives_up(mine, easy)
    v = Verdict("promises", MISSED if lost else MET,
                f"{mine.util:.3f}, {mine.max_wait / 3600:.1f} h",
                f"EASY {easy.util:.3f}, {easy.max_wait / 3600:.1f} h", partial=list(partial))
    if lost:
        v.margin = "— breaks: " + "; ".join(lost) + " (vs EASY)"
    else:
        v.margin = (f"(utilisation {mine.util - easy.util:+.3f}, longest wait "
                    f"{(mine.max_wait - easy.max_wait) / 3600:+.1f} h vs EASY)")
    return v


def best_keeping_verdict(mine: Figures | None, easy: Figures | None,
                         others: dict[str, Figures], partial: list[str]) -> Verdict:
    """Met when `mine` keeps both promises and no other run that keeps them (`others`, by
    label; EASY's among them) has a lower mean bounded slowdown."""
    if mine is None or easy is None or mine.bsld is None or not _measured_promises(mine):
        return Verdict("best-keeping", NOT_MEASURED)
    keeping = {name: f.bsld for name, f in others.items()
               if f is not mine and f.bsld is not None and not gives_up(f, easy)}
    missing = [b for b in BASELINES if b not in others]
    notes = partial + ([f"baselines not run: {', '.join(missing)}"] if missing else [])
    v = Verdict("best-keeping", MET, f"{mine.bsld:.2f}", partial=notes)
    if not keeping:
        v.reference = "no other run keeps both"
        v.margin = "(the only run that keeps both)"
        return v
    name = min(keeping, key=lambda n: keeping[n])
    best = keeping[name]
    v.reference = f"next keeping both: {name} {best:.2f}"
    change = mine.bsld / best - 1 if best else math.inf
    lost = gives_up(mine, easy)
    if lost:
        v.status = MISSED
        v.margin = f"(does not keep both: {'; '.join(lost)}; best keeping both {name} {best:.2f})"
    elif change <= 0:
        v.margin = f"by {-change * 100:.1f} % (vs {name} {best:.2f})"
    else:
        v.status = MISSED
        v.margin = f"by {change * 100:.1f} % ({name} {best:.2f} keeps both)"
    return v


def moderate_verdict(mine: Figures | None, easy: Figures | None,
                     partial: list[str]) -> Verdict:
    if mine is None or easy is None or mine.bsld is None or not easy.bsld:
        return Verdict("moderate", NOT_MEASURED)
    change = mine.bsld / easy.bsld - 1
    v = Verdict("moderate", MET if change <= MODERATE_TARGET else MISSED,
                f"{mine.bsld:.2f} ({_pct(change)})", f"EASY {easy.bsld:.2f}",
                partial=list(partial))
    gap = abs(change - MODERATE_TARGET) * 100
    v.margin = (f"by {gap:.1f} points ({_pct(change)} vs EASY)" if v.status == MET
                else f"by {gap:.1f} points ({_pct(change)} vs EASY, target ≤ −20 %)")
    return v


def judge_row(case: Case, predictor: str, cp: str, runs: dict[str, Figures],
              baselines: Sequence[str], labels: dict[str, str]) -> Row:
    """The verdicts of CP run `cp` (DEFAULT or dispatcher@profile) for one case and predictor;
    `labels`: every run the issue #24 targets compare with (baselines, DEFAULT, candidates)
    -> its label in the tables."""
    base = {b: runs.get(b) for b in baselines}
    mine = runs.get(cp)
    easy = runs.get(REFERENCE)
    partial = _partial(case, [mine, *base.values()])
    bsld, best = bsld_verdict(mine, base, partial)
    if case.rlscheduler:
        verdicts = [rl_verdict(mine, partial)]
    else:
        verdicts = [bsld, util_verdict(mine, easy, partial), wait_verdict(mine, easy, partial)]
    verdicts.append(decision_verdict(mine, easy, partial))
    others = {label: runs[key] for key, label in labels.items() if key in runs}
    verdicts += [promises_verdict(mine, easy, partial),
                 best_keeping_verdict(mine, easy, others, partial)]
    if case.moderate:
        verdicts.append(moderate_verdict(mine, easy, partial))
    return Row(case.key, predictor, cp, labels.get(cp, cp), base, best, mine, verdicts)


@dataclass(slots=True)
class Judged:
    rows: list[Row]
    default: str  # "pcp20@fast": what the default runs were, or "?"
    unmatched: list[str]  # sources of runs that are none of the cases
    duplicates: list[str]


@dataclass(slots=True)
class Collected:
    """Runs by (case, predictor) and run key, gathered from summaries or judged documents."""

    table: dict[tuple[str, str], dict[str, Figures]] = field(default_factory=dict)
    unmatched: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    defaults: list[str] = field(default_factory=list)  # dispatcher@profile of DEFAULT runs

    def add(self, case: str, predictor: str, f: Figures) -> None:
        group = self.table.setdefault((case, predictor), {})
        if f.key in group:
            if group[f.key].source != f.source:  # a judged document repeats runs per row
                self.duplicates.append(f"{f.source} (kept {group[f.key].source})")
            return
        if f.key == DEFAULT:
            self.defaults.append(f"{f.dispatcher}@{f.profile}")
        group[f.key] = f


def collect(summaries: Sequence[tuple[dict[str, Any], str]],
            documents: Sequence[dict[str, Any]] = ()) -> Collected:
    """The runs of `summaries` ((summary, where from)) and of judged `qos.json` documents."""
    found = Collected()
    for summary, source in summaries:
        key = case_of(summary)
        if key is None:
            found.unmatched.append(source)
            continue
        found.add(key, str(summary.get("predictor")), figures(summary, source))
    for document in documents:
        for row in document.get("rows", []):
            for key, stored in (row.get("runs") or {}).items():
                if stored is not None and row.get("case") in CASES:
                    f = figures_of_judged(stored)
                    f.key = key  # a run the document counted as the default stays so
                    found.add(row["case"], str(row["predictor"]), f)
    return found


def judge(summaries: Sequence[tuple[dict[str, Any], str]], cases: Sequence[Case],
          predictors: Sequence[str], baselines: Sequence[str] = BASELINES,
          candidates: Sequence[str] = (), default_as: str | None = None,
          documents: Sequence[dict[str, Any]] = ()) -> Judged:
    """Every (case, predictor) of `cases` × `predictors` gets a row for the default (and one
    per candidate dispatcher@profile), whether it ran or not. `summaries` are (summary,
    where it came from); `documents` judged `qos.json` files (their rows' runs). `default_as`
    (dispatcher@profile) counts such runs as the default where no run asked for the
    server's default."""
    found = collect(summaries, documents)
    for group in found.table.values():
        if DEFAULT not in group and default_as and default_as in group:
            group[DEFAULT] = group[default_as]
            found.defaults.append(default_as)
    default = ", ".join(dict.fromkeys(found.defaults)) or (default_as or "?")
    labels = {**{b: b for b in baselines}, DEFAULT: f"default ({default})",
              **{c: c for c in candidates}}
    rows = []
    for case in cases:
        for predictor in case.predictors_of(tuple(predictors)):
            runs = found.table.get((case.key, predictor), {})
            for cp in (DEFAULT, *candidates):
                rows.append(judge_row(case, predictor, cp, runs, baselines, labels))
    return Judged(rows, default, found.unmatched, found.duplicates)


@dataclass(slots=True)
class Frontier:
    """Every run of one case and predictor against EASY's two promises."""

    predictor: str
    runs: list[tuple[str, float, list[str]]]  # (run, mean bsld, what it gives up), lowest first
    best_keeping: tuple[str, float] | None  # lowest mean giving up nothing (EASY's run counts)


def frontier(rows: Sequence[Row], predictor: str) -> Frontier | None:
    """The runs of `rows` (one case) under `predictor` (baselines, the default, candidates),
    lowest mean bounded slowdown first, each with what it gives up against EASY; None without
    EASY's run. It shows whether any measured dispatcher reaches a low mean without paying
    with utilisation or the longest wait, the trade the issue's targets rule out."""
    mine = [r for r in rows if r.predictor == predictor]
    easy = mine[0].baselines.get(REFERENCE) if mine else None
    if easy is None:
        return None
    named: dict[str, Figures] = {}  # CP runs first: on a tie they rank first
    for r in mine:
        if r.mine is not None:
            named[r.cp_label] = r.mine
    for r in mine:
        named.update({b: f for b, f in r.baselines.items() if f is not None})
    ranked = sorted(((name, f.bsld, gives_up(f, easy)) for name, f in named.items()
                     if f.bsld is not None), key=lambda run: run[1])
    keeping = next(((name, bsld) for name, bsld, lost in ranked if not lost), None)
    return Frontier(predictor, ranked, keeping)


def frontiers(rows: Sequence[Row]) -> list[tuple[str, Frontier]]:
    """(case, frontier) for every case and predictor of `rows` with an EASY run."""
    found = []
    for case in dict.fromkeys(r.case for r in rows):
        mine = [r for r in rows if r.case == case]
        for predictor in dict.fromkeys(r.predictor for r in mine):
            f = frontier(mine, predictor)
            if f is not None:
                found.append((case, f))
    return found


