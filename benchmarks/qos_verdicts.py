"""Issue #13's verdicts from run summaries: per case and predictor, each target met or missed,
and by how much; `qos.md` and `qos.json`.

Targets of the default CP dispatcher (the server's default dispatcher and profile), on the
same case and predictor as the baselines it is compared with:

- `bsld`: mean bounded slowdown at least 20 % below the best baseline's (lowest mean of
  BASELINES that ran);
- `util`: utilisation at least EASY's − 0.005;
- `max-wait`: longest wait no longer than EASY's;
- `rlscheduler` (RLScheduler's protocol only, instead of the three above): mean over the
  sequences of the mean bounded slowdown below 58.64, its learned policy;
- `decision`: median decision time within 10× of EASY's. Here it is the ratio of the runs'
  p50 (for sequences: the mean of the per-sequence p50s); the decisions of two replays differ
  after the first, so these are the same trace and machine, not identical snapshots
  (`benchmarks.same_instances` measures that).

Next to the verdicts, each case's *frontier* (`frontier`): every run of a predictor, lowest
mean first, with what it gives up against EASY's utilisation and longest wait, and the lowest
mean among the runs that give up neither: whether any measured dispatcher gets its mean
without the trade the targets rule out.

A verdict is "met", "missed" or "not measured" (no run of the default, or of what it is
compared with); a verdict from a partial run (`--limit-jobs`, fewer sequences, baselines
missing) says so and counts apart.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from benchmarks.qos_cases import (
    BASELINES,
    CASES,
    DEFAULT,
    REFERENCE,
    RLSCHEDULER_POLICY,
    Case,
    case_of,
    run_key,
)

BSLD_TARGET = -0.20
UTIL_TOLERANCE = 0.005
DECISION_FACTOR = 10.0
MET, MISSED, NOT_MEASURED = "met", "missed", "not measured"
TARGETS = {
    "bsld": "mean bounded slowdown ≥ 20 % below the best baseline",
    "util": "utilisation ≥ EASY's − 0.005",
    "max-wait": "longest wait ≤ EASY's",
    "rlscheduler": f"RLScheduler's Lublin-1: mean bounded slowdown < {RLSCHEDULER_POLICY}",
    "decision": "decision time p50 within 10× of EASY's",
}


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
    )


def _partial(case: Case, runs: Iterable[Figures | None]) -> list[str]:
    """Why these runs are only part of the case as the issue sets it."""
    case = CASES.get(case.key, case)  # the protocol, not a quicker variant of it
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
    ran = {k: f for k, f in baselines.items() if f is not None and f.bsld is not None}
    best = min(ran, key=lambda k: ran[k].bsld or 0.0) if ran else None
    if mine is None or mine.bsld is None or best is None:
        return Verdict("bsld", NOT_MEASURED), best
    best_bsld = ran[best].bsld or 0.0
    missing = [b for b in BASELINES if b not in ran]  # the target is the best of all six
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


def judge_row(case: Case, predictor: str, cp: str, runs: dict[str, Figures],
              baselines: Sequence[str], default_label: str) -> Row:
    """The verdicts of CP run `cp` (DEFAULT or dispatcher@profile) for one case and predictor."""
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
    label = default_label if cp == DEFAULT else cp
    return Row(case.key, predictor, cp, label, base, best, mine, verdicts)


@dataclass(slots=True)
class Judged:
    rows: list[Row]
    default: str  # "pcp20@fast": what the default runs were, or "?"
    unmatched: list[str]  # sources of runs that are none of the cases
    duplicates: list[str]


def judge(summaries: Sequence[tuple[dict[str, Any], str]], cases: Sequence[Case],
          predictors: Sequence[str], baselines: Sequence[str] = BASELINES,
          candidates: Sequence[str] = (), default_as: str | None = None) -> Judged:
    """Every (case, predictor) of `cases` × `predictors` gets a row for the default (and one
    per candidate dispatcher@profile), whether it ran or not. `summaries` are (summary,
    where it came from). `default_as` (dispatcher@profile) counts such runs as the default
    where no run asked for the server's default."""
    table: dict[tuple[str, str], dict[str, Figures]] = {}
    unmatched: list[str] = []
    duplicates: list[str] = []
    defaults: list[str] = []
    for summary, source in summaries:
        key = case_of(summary)
        if key is None:
            unmatched.append(source)
            continue
        f = figures(summary, source)
        if f.key == DEFAULT:
            defaults.append(f"{f.dispatcher}@{f.profile}")
        group = table.setdefault((key, str(summary.get("predictor"))), {})
        if f.key in group:
            duplicates.append(f"{source} (kept {group[f.key].source})")
            continue
        group[f.key] = f
    for group in table.values():
        if DEFAULT not in group and default_as and default_as in group:
            group[DEFAULT] = group[default_as]
            defaults.append(default_as)
    default = ", ".join(dict.fromkeys(defaults)) or (default_as or "?")
    rows = []
    for case in cases:
        for predictor in case.predictors_of(tuple(predictors)):
            runs = table.get((case.key, predictor), {})
            for cp in (DEFAULT, *candidates):
                rows.append(judge_row(case, predictor, cp, runs, baselines,
                                      f"default ({default})"))
    return Judged(rows, default, unmatched, duplicates)


def summary_lines(judged: Judged) -> list[str]:
    """One line per target over the default's rows: met, missed, not measured, partial."""
    lines = []
    for target, text in TARGETS.items():
        verdicts = [v for r in judged.rows if r.cp == DEFAULT for v in r.verdicts
                    if v.target == target]
        if not verdicts:
            continue
        count = {s: sum(v.status == s for v in verdicts) for s in (MET, MISSED, NOT_MEASURED)}
        partial = sum(bool(v.partial) and v.status != NOT_MEASURED for v in verdicts)
        where = [f"{r.case}/{r.predictor}" for r in judged.rows if r.cp == DEFAULT
                 for v in r.verdicts if v.target == target and v.status == MISSED]
        overall = ("NOT MEASURED" if count[NOT_MEASURED] == len(verdicts) else
                   "MISSED" if count[MISSED] else
                   "MET where measured" if count[NOT_MEASURED] or partial else "MET")
        lines.append(
            f"- {text}: **{overall}** — met {count[MET]}, missed {count[MISSED]}, not measured "
            f"{count[NOT_MEASURED]} of {len(verdicts)} (case, predictor)"
            + (f"; {partial} of the measured from partial runs" if partial else "")
            + (f"; missed on {', '.join(where)}" if where else ""))
    return lines


def _fmt_bsld(f: Figures | None) -> str:
    if f is None or f.bsld is None:
        return "–"
    return f"{f.bsld:.2f}" + (f" ± {f.bsld_std:.2f}" if f.bsld_std is not None else "")


def _fmt_util(f: Figures | None) -> str:
    if f is None or f.util is None:
        return "–"
    return f"{f.util:.3f}" + (f" ± {f.util_std:.3f}" if f.sequences and f.util_std else "")


def _fmt_wait(f: Figures | None) -> str:
    return "–" if f is None or f.max_wait is None else f"{f.max_wait / 3600:.1f}"


def _fmt_ms(f: Figures | None) -> str:
    return "–" if f is None or f.decision_p50 is None else f"{f.decision_p50 * 1000:.1f}"


def case_table(rows: Sequence[Row], case: Case) -> list[str]:
    baselines = list(rows[0].baselines)
    targets = ["rlscheduler", "decision"] if case.rlscheduler else [
        "bsld", "util", "max-wait", "decision"]
    head = (["predictor", "CP run", *baselines, "best baseline", "CP bsld (vs best)",
             "util CP / EASY", "max wait [h] CP / EASY", "dec p50 [ms] CP / EASY (ratio)"]
            + [f"target: {t}" for t in targets])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
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
        cells = [r.predictor, r.cp_label, *(_fmt_bsld(r.baselines[b]) for b in baselines),
                 f"{r.best} {_fmt_bsld(best)}" if r.best else "–",
                 _fmt_bsld(r.mine) + vs,
                 f"{_fmt_util(r.mine)} / {_fmt_util(easy)}",
                 f"{_fmt_wait(r.mine)} / {_fmt_wait(easy)}",
                 f"{_fmt_ms(r.mine)} / {_fmt_ms(easy)}{ratio}",
                 *(by_target[t].text() for t in targets)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def gives_up(f: Figures, easy: Figures) -> list[str]:
    """What run `f` gives up against EASY's run: [] when its utilisation is at least EASY's −
    0.005 and its longest wait no longer (the issue's two guarantees), else each shortfall."""
    lost = []
    if f.util is not None and easy.util is not None and f.util < easy.util - UTIL_TOLERANCE:
        lost.append(f"utilisation {f.util - easy.util:+.3f}")
    if f.max_wait is not None and easy.max_wait is not None and f.max_wait > easy.max_wait:
        lost.append(f"longest wait +{(f.max_wait - easy.max_wait) / 3600:.1f} h")
    return lost


@dataclass(slots=True)
class Frontier:
    """Every run of one case and predictor against EASY's two guarantees."""

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
    named: dict[str, Figures] = {}
    for r in mine:
        named.update({b: f for b, f in r.baselines.items() if f is not None})
        if r.mine is not None:
            named[r.cp_label] = r.mine
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


def frontier_summary(judged: Judged) -> list[str]:
    """How often the default is the lowest mean that keeps EASY's guarantees, and how often
    only EASY itself keeps them."""
    found = frontiers(judged.rows)
    if not found:
        return []
    default = f"default ({judged.default})"  # the default rows' cp_label
    mine = sum(f.best_keeping is not None and f.best_keeping[0] == default for _, f in found)
    only_easy = [f"{case}/{f.predictor}" for case, f in found
                 if [name for name, _, lost in f.runs if not lost] == [REFERENCE]]
    return [f"- lowest mean among the runs that keep EASY's utilisation (− 0.005) and longest "
            f"wait: the default in {mine} of {len(found)} (case, predictor); none but EASY "
            f"keeps both in {len(only_easy)}"
            + (f" ({', '.join(only_easy)})" if only_easy else "")]


def frontier_lines(rows: Sequence[Row]) -> list[str]:
    """The frontiers of one case's rows as a table."""
    found = [f for _, f in frontiers(rows)]
    if not found:
        return []
    lines = ["Every run against EASY's guarantees (utilisation ≥ EASY's − 0.005, longest wait "
             "≤ EASY's), lowest mean bounded slowdown first; what a run gives up is in "
             "brackets:", "",
             "| predictor | lowest mean keeping both | runs |", "|---|---|---|"]
    for f in found:
        runs = "; ".join(f"{name} {bsld:.2f}" + (f" ({', '.join(lost)})" if lost else "")
                         for name, bsld, lost in f.runs)
        best = f"{f.best_keeping[0]} {f.best_keeping[1]:.2f}" if f.best_keeping else "–"
        lines.append(f"| {f.predictor} | {best} | {runs} |")
    return lines


def markdown(judged: Judged, cases: Sequence[Case], header: Sequence[str] = ()) -> str:
    lines = ["# Issue #13 targets", "", *header]
    lines += [f"Default CP dispatcher judged: **{judged.default}** (dispatcher@profile the "
              "runs that asked for the server's default resolved to; for runs that did not, "
              "the one given by --default or this checkout's default).", "",
              "## Summary (default CP dispatcher)", "", *summary_lines(judged),
              *frontier_summary(judged), ""]
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
        lines += ["; ".join(notes) + ".", "", *case_table(rows, case), ""]
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
