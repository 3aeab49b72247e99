"""Issue #13's targets benchmark (benchmarks/qos/targets.py): verdicts on hand-made summaries,
the case of a run, the cells it runs, and one real tiny run through the campaign machinery."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.matrix.cells import sequence_summary, simulate_command
from benchmarks.qos.cases import BASELINES, CASES, case_of
from benchmarks.qos.tables import markdown, summary_lines
from benchmarks.qos.targets import cells_for, main, parse_args
from benchmarks.qos.verdicts import MET, MISSED, NOT_MEASURED, frontiers, judge

KTH = {"trace": "sim_adapter/data/KTH-SP2-1996-2.1-cln.swf.xz",
       "system": {"name": "KTH-SP2-1996-2.1-cln"}, "records": None}


def run(dispatcher: str, bsld: float, util: float = 0.80, max_wait_h: float = 10.0,
        p50_ms: float = 2.0, *, predictor: str = "walltime", where: dict[str, Any] = KTH,
        default: bool = False, profile: str = "fast", limit: int | None = None,
        ) -> dict[str, Any]:
    """A run's summary with what the verdicts read."""
    return {**where, "unit_rule": where.get("unit_rule", {"proc_scale": 1.0}),
            "dispatcher": dispatcher, "dispatcher_requested": "default" if default else dispatcher,
            "profile": profile, "predictor": predictor, "limit_jobs": limit, "jobs": 100,
            "bounded_slowdown": {"mean": bsld, "std": 3.0},
            "utilisation": util, "wait_seconds": {"max": max_wait_h * 3600},
            "decision_seconds": {"p50": p50_ms / 1000}, "deterministic_search": True}


def baselines(easy: float = 50.0, others: float = 60.0, **easy_kw: Any) -> list[dict[str, Any]]:
    return [run("easy", easy, **easy_kw), *(run(b, others) for b in BASELINES[1:])]


def verdicts(runs: list[dict[str, Any]], cases: tuple[str, ...] = ("kth",),
             predictors: tuple[str, ...] = ("walltime",)) -> dict[str, Any]:
    judged = judge([(s, f"run{i}") for i, s in enumerate(runs)], [CASES[c] for c in cases],
                   predictors)
    row = judged.rows[0]
    return {v.target: v for v in row.verdicts} | {"row": row, "judged": judged}


def test_every_target_met() -> None:
    v = verdicts([*baselines(), run("pcp20", 35.0, util=0.797, max_wait_h=9.0, p50_ms=15.0,
                                    default=True)])
    assert [v[t].status for t in ("bsld", "util", "max-wait", "decision")] == [MET] * 4
    assert v["row"].best == "easy" and v["row"].cp_label == "default (pcp20@fast)"
    assert "by 10.0 points (-30.0 % vs best)" in v["bsld"].text()
    assert not v["bsld"].partial
    lines = summary_lines(v["judged"])
    assert lines[0].startswith("- mean bounded slowdown ≥ 20 % below the best baseline: **MET**")


def test_the_frontier_ranks_every_run_with_what_it_gives_up_against_easy() -> None:
    runs = [run("easy", 50.0, max_wait_h=10.0), run("easy-sjf", 30.0, max_wait_h=20.0),
            *(run(b, 60.0, util=0.79) for b in BASELINES[2:]),
            run("pcp20", 35.0, util=0.797, max_wait_h=9.0, default=True)]
    judged = verdicts(runs)["judged"]
    [(case, f)] = frontiers(judged.rows)
    assert case == "kth" and f.predictor == "walltime"
    assert [name for name, _, _ in f.runs][:3] == ["easy-sjf", "default (pcp20@fast)", "easy"]
    assert f.runs[0][2] == ["longest wait +10.0 h"]
    assert f.runs[-1][2] == ["utilisation -0.010"]
    assert f.best_keeping == ("default (pcp20@fast)", 35.0)
    text = markdown(judged, [CASES["kth"]])
    row = "| walltime | default (pcp20@fast) 35.00 | easy-sjf 30.00 (longest wait +10.0 h);"
    assert row in text
    assert ("both promises (in ≥ 17 of the issue's 21 pairs): **NOT DECIDED** — met 1, "
            "missed 0, not measured 0 of 1 (case, predictor); EASY's own run is the lowest "
            "keeping both in 0, the only run keeping both in 0") in text


def test_the_frontier_says_when_only_easy_keeps_its_guarantees() -> None:
    runs = [*baselines(easy=50.0, others=40.0, max_wait_h=1.0),
            run("pcp20", 35.0, max_wait_h=9.0, default=True)]
    judged = verdicts(runs)["judged"]
    [(_, f)] = frontiers(judged.rows)
    assert f.best_keeping == ("easy", 50.0)  # every other run waits longer than EASY's 1 h
    assert ("EASY's own run is the lowest keeping both in 1, the only run keeping both in 1 "
            "(kth/walltime)") in markdown(judged, [CASES["kth"]])
    assert frontiers(verdicts([run("pcp20", 35.0, default=True)])["judged"].rows) == []


def test_missed_by_utilisation() -> None:
    v = verdicts([*baselines(), run("pcp20", 35.0, util=0.790, default=True)])
    assert v["bsld"].status == MET
    assert v["util"].status == MISSED
    assert "by 0.005 (-0.010 vs EASY, allowed −0.005)" in v["util"].text()


def test_missed_by_max_wait() -> None:
    v = verdicts([*baselines(max_wait_h=10.0), run("pcp20", 30.0, max_wait_h=12.5,
                                                   default=True)])
    assert (v["bsld"].status, v["util"].status, v["max-wait"].status) == (MET, MET, MISSED)
    assert "by 2.5 h, +25 %" in v["max-wait"].text()
    assert "missed on kth/walltime" in summary_lines(v["judged"])[2]


def test_the_best_baseline_is_not_easy() -> None:
    runs = [run("easy", 100.0), *(run(b, 90.0) for b in BASELINES[1:4]),
            run("easy-f1", 40.0), run("conservative", 95.0),
            run("pcp20", 36.0, p50_ms=25.0, default=True)]  # -64 % vs EASY, -10 % vs F1
    v = verdicts(runs)
    assert v["row"].best == "easy-f1"
    assert v["bsld"].status == MISSED
    assert v["bsld"].reference == "best baseline easy-f1 40.00"
    assert "by 10.0 points (-10.0 % vs best easy-f1" in v["bsld"].text()
    assert v["decision"].status == MISSED and "by 1.2×" in v["decision"].text()
    # Utilisation and the longest wait stay against EASY
    assert v["util"].reference == "EASY 0.800" and v["util"].status == MET


def test_not_measured_is_never_met() -> None:
    # only baselines ran: no default; and lublin did not run at all
    v = verdicts(baselines(), cases=("kth", "lublin"))
    judged = v["judged"]
    assert all(x.status == NOT_MEASURED for r in judged.rows for x in r.verdicts)
    assert all(x.text() == "not measured" for r in judged.rows for x in r.verdicts)
    lines = summary_lines(judged)
    assert all("**NOT MEASURED** — met 0, missed 0, not measured 2 of 2" in line
               for line in lines if "moderately loaded" not in line)
    assert any("moderately loaded" in line and "not measured 1 of 1" in line for line in lines)
    text = markdown(judged, [CASES["kth"], CASES["lublin"]])
    assert "MET" not in text.replace("NOT MEASURED", "")
    # without EASY, what is compared with EASY is not measured either
    v = verdicts([run(b, 60.0) for b in BASELINES[1:]] + [run("pcp20", 30.0, default=True)])
    assert v["bsld"].status == MET and "baselines not run: easy" in v["bsld"].text()
    assert {v[t].status for t in ("util", "max-wait", "decision")} == {NOT_MEASURED}


def test_partial_runs_and_the_rlscheduler_protocol() -> None:
    rl = {"trace": "/x/lublin_256.swf.xz", "system": {"name": "lublin_256"}, "records": None}
    seq = [{**run(d, b, where=rl, default=d == "pcp20"),
            "sequence": {"index": i, "start": 1000 + i, "length": 1024, "seed": 1}}
           for d, b in (("easy", 200.0), ("pcp20", 60.0)) for i in range(10)]
    cells = [sequence_summary([s for s in seq if s["dispatcher"] == d]) for d in ("easy", "pcp20")]
    assert [case_of(c) for c in cells] == ["rlscheduler"] * 2
    v = verdicts(cells, cases=("rlscheduler",))
    assert v["rlscheduler"].status == MISSED and "by 1.36 (+2.3 %)" in v["rlscheduler"].text()
    assert v["rlscheduler"].value == "60.00 ± 0.00" and not v["rlscheduler"].partial
    assert "bsld" not in v  # the protocol has its own slowdown target
    cells[1]["bounded_slowdown"]["mean"] = 50.0
    cells[1]["sequences"]["count"] = 2
    v = verdicts(cells, cases=("rlscheduler",))
    assert v["rlscheduler"].status == MET
    assert v["rlscheduler"].partial == ["2 sequences of 1024 jobs, seed 1"]
    v = verdicts([*baselines(), run("pcp20", 30.0, default=True, limit=200)])
    assert v["bsld"].status == MET and "(partial: first 200 jobs)" in v["bsld"].text()
    assert "1 of the measured from partial runs" in summary_lines(v["judged"])[0]


def test_case_of_a_run() -> None:
    llnl = {"trace": "t/LLNL-Atlas-2006-2.1-cln.swf.xz", "records": {"first": 5500,
                                                                       "last": 8500}}
    assert case_of({**llnl, "system": {"name": "LLNL-Atlas-2006-2.1-cln"}}) == "llnl-stretch"
    assert case_of({**llnl, "system": {"name": "kit-forhlr2"},
                    "unit_rule": {"proc_scale": 2.5}}) == "kit"
    assert case_of({**llnl, "system": {"name": "kit-forhlr2"}}) is None  # another rule
    assert case_of({"trace": "runs/slices/LLNL-Atlas-5500.swf.xz",  # matrix-llnl-slice.yaml
                    "system": {"name": "LLNL-Atlas-5500"}}) == "llnl-stretch"
    assert case_of({**llnl, "records": None, "system": {"name": "x"}}) is None
    assert case_of({"trace": "runs/slices/lublin_256-5500.swf.xz", "system": {"name": "eurora"},
                    "unit_rule": {"proc_scale": 4, "accelerator_share": 0.3}}) == "eurora"
    assert case_of({**KTH, "limit_jobs": 100}) == "kth"


def test_cells_carry_each_case_to_hpcdispatch_simulate() -> None:
    args = parse_args(["--cases", "kit,rlscheduler", "--predictors", "walltime,oracle",
                       "--candidates", "pcp20@papers", "--traces-dir", "/nowhere",
                       "--scheduler", "tcp://x:1", "--wall-clock-search"])
    cells = cells_for(args)
    kit = [c for c in cells if c["name"].startswith("kit__")]
    rl = [c for c in cells if c["name"].startswith("rlscheduler__")]
    assert len(kit) == 2 * (len(BASELINES) + 2) and len(rl) == len(BASELINES) + 2  # walltime
    assert [c["dispatcher"] for c in rl] == [*BASELINES, "default", "pcp20"]
    command = simulate_command(kit[0], Path("t.swf"), Path("o"))
    assert command[command.index("--records") + 1] == "5500:8500"
    assert command[command.index("--system") + 1] == "kit-forhlr2"
    assert "--wall-clock-search" in command and "--sequences" not in command
    command = simulate_command(rl[-1], Path("t.swf"), Path("o"))
    assert command[command.index("--sequences") + 1:command.index("--sequences") + 6] == [
        "10", "--sequence-length", "1024", "--seed", "1"]
    assert command[command.index("--profile") + 1] == "papers"
    assert main(["--cases", "nope"]) == 2
    assert main(["--candidates", "easy-sjf", "--dry-run"]) == 2


def test_a_real_tiny_run_prints_the_table_and_can_be_judged_again(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "qos"
    code = main(["--cases", "bundled", "--predictors", "walltime", "--baselines",
                 "easy,easy-sjf", "--limit-jobs", "200", "--wall-clock-search", "--workers", "1",
                 "--no-progress", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    assert "| walltime | default (pcp20@" in printed
    assert "(partial: first 200 jobs; baselines not run: easy-wfp3" in printed
    document = json.loads((out / "qos.json").read_text())
    (row,) = document["rows"]
    assert row["cp"] == "default" and row["runs"]["default"]["dispatcher"] == "pcp20"
    assert {v["target"] for v in row["verdicts"]} == {"bsld", "util", "max-wait", "decision",
                                                      "promises", "best-keeping"}
    assert all(v["status"] in (MET, MISSED) for v in row["verdicts"])
    # the figures are those of the runs' own summaries
    for key in ("easy", "easy-sjf", "default"):
        (cell,) = (out / "campaign").glob(f"*__{key}")
        summary = json.loads((cell / "summary.json").read_text())
        assert summary["jobs"] == 200
        assert row["runs"][key]["bsld"] == summary["bounded_slowdown"]["mean"]
        assert row["runs"][key]["max_wait"] == summary["wait_seconds"]["max"]
        assert row["runs"][key]["wait_p99"] == summary["wait_seconds"]["p99"] is not None
    easy, mine = row["runs"]["easy"], row["runs"]["default"]
    # issue #24's table shows the wait's tails; the frontier plot is next to qos.md
    def hours(seconds: float) -> str:  # as the tables write hours
        return f"{seconds / 3600:.1f}" if seconds >= 36_000 else f"{seconds / 3600:.2f}"
    p95 = f"{hours(mine['wait_p95'])} / {hours(easy['wait_p95'])}"
    assert f"| {p95} |" in (out / "qos.md").read_text()
    assert "](frontier-bundled.png)" in printed and (out / "frontier-bundled.png").is_file()
    util = next(v for v in row["verdicts"] if v["target"] == "util")
    assert util["status"] == (MET if mine["util"] >= easy["util"] - 0.005 else MISSED)
    # judged again from the directory, without running: the same verdicts
    assert main(["--from", str(out), "--cases", "bundled", "--predictors", "walltime",
                 "--baselines", "easy,easy-sjf", "--out", str(tmp_path / "again")]) == 0
    again = json.loads((tmp_path / "again" / "qos.json").read_text())
    assert again["rows"][0]["verdicts"] == row["verdicts"]
    # from the judged document, leaving out one baseline's runs: it is "not run" there
    assert main(["--from", str(out / "qos.json"), "--not-from-documents", "easy-sjf",
                 "--cases", "bundled", "--predictors", "walltime", "--baselines",
                 "easy,easy-sjf", "--out", str(tmp_path / "without")]) == 0
    without = json.loads((tmp_path / "without" / "qos.json").read_text())
    assert without["rows"][0]["runs"]["easy-sjf"] is None and row["runs"]["easy-sjf"]
    assert without["rows"][0]["runs"]["easy"] == row["runs"]["easy"]
    assert "Runs of easy-sjf in the judged documents left out." in (
        tmp_path / "without" / "qos.md").read_text()
