"""Issue #41's frontier (benchmarks/qos/frontier.py): the dominance, default-rung and decision
verdicts on hand-made summaries, the cells it runs (a rung is a search override), and one real
tiny run through the campaign machinery, resumed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.matrix.cells import simulate_command
from benchmarks.qos.frontier import build_parser, cells_for, main
from benchmarks.qos.frontier_tables import markdown
from benchmarks.qos.ladder_verdicts import (
    RULES,
    decision_verdict,
    default_verdict,
    dominance,
    pairs_of,
)
from hpcdispatch.server.domain.promise_ladder import DEFAULT_RUNG, LADDER, rung

KTH = {"trace": "sim_adapter/data/KTH-SP2-1996-2.1-cln.swf.xz",
       "system": {"name": "KTH-SP2-1996-2.1-cln"}, "records": None,
       "unit_rule": {"proc_scale": 1.0}, "predictor": "walltime", "jobs": 100}


def summary(bsld: float, util: float = 0.80, wait_h: float = 10.0, arrival: float = 0.80,
            p50_ms: float = 1.0, *, dispatcher: str = "easy",
            rung_name: str | None = None) -> dict[str, Any]:
    """A run's summary with what the verdicts read; a rung's when `rung_name` is given."""
    search = {"promise_after_s": rung(rung_name).promise_after_s} if rung_name else {}
    return {**KTH, "dispatcher": "pcp20" if rung_name else dispatcher,
            "profile": "book" if rung_name else "", "search": search,
            "bounded_slowdown": {"mean": bsld}, "utilisation": util,
            "utilisation_arrival_window": arrival, "wait_seconds": {"max": wait_h * 3600},
            "decision_seconds": {"p50": p50_ms / 1000, "p99": p50_ms / 100}}


def rules(**overrides: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """Every rule at mean 100, utilisation 0.80, longest wait 10 h, with `overrides`."""
    return [(summary(**{"bsld": 100.0, **overrides.get(r, {})}, dispatcher=r), r) for r in RULES]


def test_a_rung_dominates_a_rule_only_when_it_keeps_its_tail_and_utilisation() -> None:
    runs = rules(los={"wait_h": 5.0}, easy={"util": 0.90})
    runs += [(summary(90.0, util=0.80, wait_h=9.0, rung_name="4h"), "4h"),
             (summary(50.0, util=0.80, wait_h=12.0, rung_name="head"), "head")]
    (pair,) = pairs_of(runs)
    sjbf = dominance(pair, "easy-sjbf")
    assert sjbf is not None and sjbf.met and sjbf.by == "4h" and sjbf.says == "mean -10.0%"
    los = dominance(pair, "los")  # both wait longer than 5 h: the lower mean is named
    assert los is not None and not los.met and (los.by, los.says) == ("head", "longest wait +7.0 h")
    easy = dominance(pair, "easy")  # 0.80 < 0.90 - 0.005
    assert easy is not None and not easy.met and "utilisation -0.100" in easy.says


def test_a_mean_only_4_percent_lower_does_not_dominate() -> None:
    (pair,) = pairs_of([*rules(), (summary(96.0, rung_name="arrival"), "a")])
    cell = dominance(pair, "conservative")
    assert cell is not None and not cell.met and "mean -4.0% (needs −5 %)" in cell.says


def test_the_arrival_window_counts_apart() -> None:
    """A rung that loses utilisation over the makespan (the drain) but not over the arrival
    window dominates by the second count only."""
    runs = [*rules(), (summary(80.0, util=0.78, arrival=0.80, rung_name="24h"), "24h")]
    (pair,) = pairs_of(runs)
    makespan, window = dominance(pair, "easy"), dominance(pair, "easy", arrival=True)
    assert makespan is not None and not makespan.met
    assert window is not None and window.met


def test_the_default_rung_keeps_easys_promises_and_its_decisions_are_timed() -> None:
    runs = [*rules(easy={"p50_ms": 1.0}),
            (summary(80.0, wait_h=10.0, p50_ms=9.0, rung_name=DEFAULT_RUNG), "d"),
            (summary(70.0, wait_h=11.0, p50_ms=11.0, rung_name="head"), "h")]
    (pair,) = pairs_of(runs)
    keeps, lower, text = default_verdict(pair) or (False, False, "")
    assert keeps and lower and text.startswith("mean -20.0%")
    ok, says = decision_verdict(pair) or (True, "")
    assert not ok and "11.0× EASY's (head)" in says  # the slowest rung decides


def test_a_run_of_another_profile_or_knob_value_is_no_rung() -> None:
    other = summary(10.0, rung_name="24h")
    other["search"] = {"promise_after_s": 1234}
    qos = summary(10.0, rung_name="24h")
    qos["profile"] = "qos"
    (pair,) = pairs_of([*rules(), (other, "x"), (qos, "y")])
    assert pair.rungs == {}


def test_cells_are_the_rules_and_one_per_rung_each_a_search_override() -> None:
    args = build_parser().parse_args(["--cases", "kit", "--predictors", "walltime"])
    cells = cells_for(args)
    rungs = [c for c in cells if c["dispatcher"] == "pcp20"]
    assert sorted(c["dispatcher"] for c in cells if c not in rungs) == sorted(RULES)
    assert [c["search"] for c in rungs] == [
        {"promise_after_s": step.promise_after_s} for step in LADDER]
    command = simulate_command(rungs[0], None, Path("out"))
    assert command[command.index("--search") + 1] == "promise_after_s=0"
    assert command[command.index("--profile") + 1] == "book"
    assert all("--profile" not in simulate_command(c, None, Path("o")) for c in cells
               if c not in rungs)  # a profile for baselines alone is refused


def test_a_tiny_frontier_runs_and_resumes(tmp_path: Path) -> None:
    """The bundled slice, two rungs, the first 150 jobs: every cell runs once, then the same
    command again runs none and judges the same runs."""
    argv = ["--cases", "bundled", "--predictors", "walltime", "--rungs", "arrival,head",
            "--limit-jobs", "150", "--workers", "1", "--no-progress", "--out", str(tmp_path)]
    assert main(argv) == 0
    first = json.loads((tmp_path / "frontier.json").read_text())
    (pair,) = first["pairs"]
    assert sorted(pair["rules"]) == sorted(RULES) and sorted(pair["rungs"]) == ["arrival", "head"]
    assert (tmp_path / "frontier-bundled-walltime.png").stat().st_size > 10_000
    assert "7 cells (0 kept from an earlier run), 0 failed" in (
        tmp_path / "frontier.md").read_text()
    assert main(argv) == 0  # resumed: nothing left to run
    assert "7 cells (7 kept from an earlier run), 0 failed" in (
        tmp_path / "frontier.md").read_text()
    assert json.loads((tmp_path / "frontier.json").read_text())["pairs"] == first["pairs"]
    assert "## Dominance" in markdown(pairs_of([]), [], {})


def test_a_cell_of_sequences_counts_the_promises_of_all_of_them() -> None:
    from benchmarks.matrix.cells import sequence_summary

    def seq(jobs: int, late: int, p95: float) -> dict[str, Any]:
        return {**summary(10.0), "sequence": {"seed": 1, "length": 4},
                "promise_accuracy": {"reported_jobs": jobs, "promised": {
                    "jobs": jobs, "late_jobs": late, "on_time_share": 1 - late / jobs,
                    "late_seconds": {"p50": p95, "p95": p95, "max": 2 * p95}}}}

    merged = sequence_summary([seq(10, 0, 0.0), seq(30, 3, 600.0)])["promise_accuracy"]
    promised = merged["promised"]
    assert (merged["reported_jobs"], promised["jobs"], promised["late_jobs"]) == (40, 40, 3)
    assert promised["on_time_share"] == 37 / 40
    assert promised["late_seconds"] == {"p50": 300.0, "p95": 300.0, "max": 1200.0}


def test_a_judged_frontier_json_is_judged_again_as_its_runs_were(tmp_path: Path) -> None:
    """A frontier run in parts: the earlier parts' judged frontier.json stands for their runs
    (every figure the tables show, promises kept included), and a directory's run of the same
    pair and name replaces the document's."""
    from benchmarks.qos.frontier import judged_pairs
    from benchmarks.qos.frontier_tables import document

    head = summary(70.0, wait_h=11.0, rung_name="head")
    head["promise_accuracy"] = {"promised": {"jobs": 9, "on_time_share": 8 / 9,
                                             "late_seconds": {"p95": 5400.0}},
                                "estimated": {"jobs": 20, "on_time_share": 0.55}}
    runs = [*rules(), (summary(80.0, rung_name="24h"), "d"), (head, "h")]
    pairs = pairs_of(runs)
    stored = tmp_path / "frontier.json"
    stored.write_text(json.dumps(document(pairs, {"command": "x"})))
    again = judged_pairs([stored])
    assert markdown(again, [], {}) == markdown(pairs, [], {})
    assert "88.9% (1.5) [55.0%]" in markdown(again, [], {})
    # A newer 24h run (on disk as a simulate run) replaces the document's.
    newer = tmp_path / "part2" / "run"
    newer.mkdir(parents=True)
    (newer / "summary.json").write_text(json.dumps(summary(60.0, rung_name=DEFAULT_RUNG)))
    (pair,) = judged_pairs([stored, tmp_path / "part2"])
    assert pair.rungs[DEFAULT_RUNG].figures.bsld == 60.0 and pair.rungs["head"].figures.bsld == 70.0
    assert main(["--from", str(tmp_path / "missing.json"), "--out", str(tmp_path)]) == 2
