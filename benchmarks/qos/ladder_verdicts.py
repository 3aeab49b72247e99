"""Issue #41's verdicts: the promise book's ladder against every classical rule, per pair.

A pair is a case and a predictor (issue #13's 21). Its runs are the classical rules (EASY,
EASY-SJBF, EASY-LXF, LOS, conservative, which gives EASY-k's figures: one rule) and the ladder's
rungs (`server/domain/promise_ladder.py`), replayed side by side in one campaign.

- *dominance*: for each rule R, some rung has longest wait <= R's, utilisation >= R's - 0.005
  and mean bounded slowdown <= 0.95 x R's. Utilisation is the makespan's (the headline) and,
  as a second count, the one over the arrival window (first to last submit: on a 1,024-job
  sequence the makespan's is mostly the drain after the last arrival). A missed cell names the
  rung that comes closest and what it misses, by how much.
- *default*: the default rung keeps both of EASY's promises (utilisation >= EASY's - 0.005,
  longest wait <= EASY's), and its mean is below EASY's.
- *decision time*: every rung's median decision within 10x EASY's; on RLScheduler's protocol
  every rung's p99 <= 2 s.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.qos.cases import CASES, Case, case_of
from benchmarks.qos.verdicts import Figures, figures, figures_of_judged
from hpcdispatch.server.domain.promise_ladder import DEFAULT_RUNG, LADDER, rung_of

RULES = ("easy", "easy-sjbf", "easy-lxf", "los", "conservative")
REFERENCE = "easy"
UTIL_TOLERANCE = 0.005
MEAN_FACTOR = 0.95
DECISION_FACTOR = 10.0
RL_P99_SECONDS = 2.0


@dataclass(slots=True)
class Run:
    """What the tables show of one run: the shared figures and this issue's extra ones."""

    name: str  # a rule, or a rung's name
    figures: Figures
    util_arrival: float | None
    decision_p99: float | None  # seconds
    # Promise accuracy (sim_adapter's summary): the share of the promised jobs that started no
    # later than their first promise, the p95 of the others' lateness, and the share of the
    # jobs given only estimates that started no later than their first one.
    promised_jobs: int = 0
    promised_on_time: float | None = None
    late_p95: float | None = None  # seconds
    estimated_on_time: float | None = None


@dataclass(slots=True)
class Cell:
    """One (pair, rule) cell of the dominance table."""

    rule: str
    met: bool
    by: str  # the rung that dominates (met), or the closest one (missed)
    says: str  # by how much, in words


@dataclass(slots=True)
class Pair:
    case: Case
    predictor: str
    rules: dict[str, Run] = field(default_factory=dict)
    rungs: dict[str, Run] = field(default_factory=dict)

    @property
    def title(self) -> str:
        return f"{self.case.title}, {self.predictor}"


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def run_of(summary: dict[str, Any], source: str = "") -> Run | None:
    """A rule's or a rung's run from its summary (None: neither)."""
    dispatcher = str(summary.get("dispatcher", ""))
    if dispatcher in RULES:
        name = dispatcher
    else:
        after = (summary.get("search") or {}).get("promise_after_s")
        step = rung_of(after) if isinstance(after, int) else None
        if step is None or summary.get("profile") != "book":
            return None
        name = step.name
    decisions = summary.get("decision_seconds") or {}
    accuracy = summary.get("promise_accuracy") or {}
    promised, estimated = accuracy.get("promised") or {}, accuracy.get("estimated") or {}
    return Run(name, figures(summary, source), _number(summary.get("utilisation_arrival_window")),
               _number(decisions.get("p99")), int(promised.get("jobs") or 0),
               _number(promised.get("on_time_share")),
               _number((promised.get("late_seconds") or {}).get("p95")),
               _number(estimated.get("on_time_share")))


def pairs_of(summaries: Sequence[tuple[dict[str, Any], str]]) -> list[Pair]:
    """The runs grouped by case and predictor, in the cases' order."""
    found: dict[tuple[str, str], Pair] = {}
    for summary, source in summaries:
        key, run = case_of(summary), run_of(summary, source)
        if key is None or run is None:
            continue
        predictor = str(summary.get("predictor", ""))
        pair = found.setdefault((key, predictor), Pair(CASES[key], predictor))
        (pair.rules if run.name in RULES else pair.rungs)[run.name] = run
    return _in_case_order(found.values())


def _in_case_order(pairs: Iterable[Pair]) -> list[Pair]:
    order = {key: k for k, key in enumerate(CASES)}
    return sorted(pairs, key=lambda p: (order[p.case.key], p.predictor))


def _stored_run(name: str, stored: dict[str, Any]) -> Run:
    """A run as `frontier_tables.document` stores it (fields it lacks: None, or 0 jobs)."""
    return Run(name, figures_of_judged(stored), _number(stored.get("util_arrival")),
               _number(stored.get("decision_p99")), int(stored.get("promised_jobs") or 0),
               _number(stored.get("promised_on_time")), _number(stored.get("late_p95")),
               _number(stored.get("estimated_on_time")))


def pairs_of_judged(document: dict[str, Any]) -> list[Pair]:
    """The pairs of a judged `frontier.json`, to judge again beside newer runs."""
    pairs = []
    for stored in document.get("pairs", []):
        key = stored.get("case")
        if key not in CASES:
            raise ValueError(f"frontier.json: unknown case {key!r}; one of {list(CASES)}")
        pairs.append(Pair(
            CASES[key], str(stored.get("predictor", "")),
            rules={n: _stored_run(n, r) for n, r in (stored.get("rules") or {}).items()},
            rungs={n: _stored_run(n, r) for n, r in (stored.get("rungs") or {}).items()}))
    return pairs


def merged(*groups: Sequence[Pair]) -> list[Pair]:
    """The pairs of every group in the cases' order; a run of a later group replaces the same
    run (pair and name) of an earlier one."""
    found: dict[tuple[str, str], Pair] = {}
    for group in groups:
        for pair in group:
            into = found.setdefault((pair.case.key, pair.predictor),
                                    Pair(pair.case, pair.predictor))
            into.rules.update(pair.rules)
            into.rungs.update(pair.rungs)
    return _in_case_order(found.values())


def _util(run: Run, arrival: bool) -> float | None:
    return run.util_arrival if arrival else run.figures.util


def _shortfalls(rung: Run, rule: Run, arrival: bool) -> list[str]:
    """What `rung` misses of dominating `rule`, in words (empty: it dominates)."""
    mine, theirs = rung.figures, rule.figures
    out = []
    if mine.max_wait is not None and theirs.max_wait is not None \
            and mine.max_wait > theirs.max_wait:
        out.append(f"longest wait +{(mine.max_wait - theirs.max_wait) / 3600:.1f} h")
    u_mine, u_theirs = _util(rung, arrival), _util(rule, arrival)
    if u_mine is not None and u_theirs is not None and u_mine < u_theirs - UTIL_TOLERANCE:
        out.append(f"utilisation {u_mine - u_theirs:+.3f}")
    if mine.bsld is not None and theirs.bsld is not None \
            and mine.bsld > MEAN_FACTOR * theirs.bsld:
        out.append(f"mean {mine.bsld / theirs.bsld - 1:+.1%} (needs −5 %)")
    return out


def dominance(pair: Pair, rule: str, arrival: bool = False) -> Cell | None:
    """Whether some rung dominates `rule` on this pair (None: the rule or every rung missing)."""
    theirs = pair.rules.get(rule)
    if theirs is None or not pair.rungs:
        return None
    misses = {name: _shortfalls(run, theirs, arrival) for name, run in pair.rungs.items()}
    winners = [name for name, miss in misses.items() if not miss]
    if winners:
        best = min(winners, key=lambda n: pair.rungs[n].figures.bsld or 0.0)
        mean = (pair.rungs[best].figures.bsld or 0.0) / (theirs.figures.bsld or 1.0) - 1
        return Cell(rule, True, best, f"mean {mean:+.1%}")
    # Closest: the fewest conditions missed, then the lowest mean.
    best = min(misses, key=lambda n: (len(misses[n]), pair.rungs[n].figures.bsld or 0.0))
    return Cell(rule, False, best, "; ".join(misses[best]))


def default_verdict(pair: Pair) -> tuple[bool, bool, str] | None:
    """(keeps EASY's two promises, mean below EASY's, in words) of the default rung."""
    mine, easy = pair.rungs.get(DEFAULT_RUNG), pair.rules.get(REFERENCE)
    if mine is None or easy is None:
        return None
    keeps = not [s for s in _shortfalls(mine, easy, False) if not s.startswith("mean")]
    lower = (mine.figures.bsld or 0.0) < (easy.figures.bsld or 0.0)
    misses = [s for s in _shortfalls(mine, easy, False) if not s.startswith("mean")]
    mean = (mine.figures.bsld or 0.0) / (easy.figures.bsld or 1.0) - 1
    return keeps, lower, "; ".join([f"mean {mean:+.1%}", *misses])


def decision_verdict(pair: Pair) -> tuple[bool, str] | None:
    """Every rung's median decision within 10x EASY's (and p99 <= 2 s on RLScheduler's)."""
    easy = pair.rules.get(REFERENCE)
    if easy is None or not pair.rungs or not easy.figures.decision_p50:
        return None
    ratios = {n: (r.figures.decision_p50 or 0.0) / easy.figures.decision_p50
              for n, r in pair.rungs.items()}
    worst = max(ratios, key=ratios.__getitem__)
    ok = ratios[worst] <= DECISION_FACTOR
    text = f"p50 ≤ {ratios[worst]:.1f}× EASY's ({worst})"
    if pair.case.rlscheduler:
        p99 = max((r.decision_p99 or 0.0) for r in pair.rungs.values())
        ok = ok and p99 <= RL_P99_SECONDS
        text += f"; p99 ≤ {p99:.2f} s"
    return ok, text


def rung_names() -> list[str]:
    return [step.name for step in LADDER]
