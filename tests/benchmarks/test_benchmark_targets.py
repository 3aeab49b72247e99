"""The benchmarks' outputs: target verdicts (met, or missed by how much) and campaign figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.matrix.plot import matrix, plot
from benchmarks.matrix.report import target_lines
from benchmarks.scale.snapshots import target_line
from hpcdispatch.server.domain.profiles import DEFAULT_PROFILE

LLNL = "LLNL-Atlas-2006-2.1-cln.swf.xz"


def _entry(dispatcher: str, bsld: float, util: float, decision_s: float,
           trace: str = LLNL, limit: int | None = None, profile: str = "") -> dict[str, Any]:
    return {
        "status": "ok",
        "spec": {"trace": trace, "trace_file": trace, "system": None, "predictor": "walltime",
                 "dispatcher": dispatcher, "profile": profile, "limit_jobs": limit},
        "summary": {"system": {"name": "LLNL"}, "bounded_slowdown": {"mean": bsld},
                    "utilisation": util, "decision_seconds": {"mean": decision_s}},
    }


def test_campaign_targets_say_by_how_much_they_are_missed() -> None:
    lines = target_lines([_entry("easy", 10.0, 0.800, 0.020), _entry("pcp20", 9.0, 0.790, 0.075)])
    assert len(lines) == 2
    assert "-10.0%" in lines[0] and "10.0 points short on slowdown" in lines[0]
    assert "utilisation 0.010 lower" in lines[0]
    assert "75.0 ms" in lines[1] and "**missed** by 1.5×" in lines[1]


def test_campaign_targets_met_and_slices_without_the_llnl_decision_verdict() -> None:
    lines = target_lines([_entry("easy", 10.0, 0.8, 0.02, limit=1000),
                          _entry("pcp20", 7.0, 0.8, 0.03, limit=1000)])
    assert lines[0].endswith("**met**")
    assert lines[1].endswith("the target is set for the full trace")  # a slice: no verdict


def test_a_slowdown_target_below_one_is_not_reachable() -> None:
    lines = target_lines([_entry("easy", 1.1, 0.8, 0.02), _entry("pcp20", 1.0, 0.8, 0.02)])
    assert "not reachable" in lines[0] and "EASY's is 1.10" in lines[0]
    assert lines[1].endswith("**met**")  # 20 ms < 50 ms


def test_campaign_targets_judge_the_default_profile_only() -> None:
    # "" asks for the server's default and DEFAULT_PROFILE names it; "papers" (and the former
    # default "fast") are other profiles, not judged against the targets.
    runs = [_entry("easy", 10.0, 0.8, 0.02, limit=1000)]
    runs += [_entry("pcp20", bsld, 0.8, 0.03, limit=1000, profile=profile)
             for bsld, profile in ((7.0, DEFAULT_PROFILE), (9.0, "papers"), (9.5, "fast"))]
    lines = target_lines(runs)
    assert len(lines) == 2 and "-30.0%" in lines[0]  # the qos cell's verdict and its note


def test_scale_target_line() -> None:
    assert "**missed** by 12.3×" in target_line(12_345.0)
    assert "**met**" in target_line(800.0)
    assert "not measured" in target_line(None)


def test_campaign_plot_groups_cells_by_trace_and_system_and_writes_the_figures(
        tmp_path: Path) -> None:
    cells = [_entry(d, b, u, 0.01, trace="KTH.swf.xz") for d, b, u in
             (("easy", 20.0, 0.7), ("pcp20", 10.0, 0.7))]
    cells.append({**_entry("easy", 5.0, 0.9, 0.01, trace="lublin.swf.xz"), "status": "failed"})
    on_kit = _entry("easy", 3.0, 0.3, 0.02, trace="KTH.swf.xz")
    on_kit["spec"]["system"] = "kit-forhlr2"
    on_kit["summary"]["system"]["name"] = "kit-forhlr2"
    cells.append(on_kit)
    for cell in cells:
        summary = cell["summary"]
        summary["bounded_slowdown"]["std"] = 1.0
        summary["slowdown"] = {"mean": summary["bounded_slowdown"]["mean"] + 1, "std": 3.0}
        summary["wait_seconds"] = {"mean": 100.0, "std": 50.0}
    grouped = matrix({"cells": cells})
    assert list(grouped) == ["KTH", "KTH on kit-forhlr2"]  # failed cells are left out
    assert grouped["KTH"][("walltime", "pcp20")] == {
        "sld": 11.0, "sld_std": 3.0, "bsld": 10.0, "bsld_std": 1.0, "wait": 100.0,
        "wait_std": 50.0, "util": 0.7, "decision_ms": 10.0}
    assert grouped["KTH on kit-forhlr2"][("walltime", "easy")]["bsld"] == 3.0
    written = plot({"cells": cells}, tmp_path)
    assert [p.name for p in written] == ["campaign_slowdown.png", "campaign_bsld.png",
                                         "campaign_wait.png", "campaign_utilisation.png",
                                         "campaign_decision.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in written)


def _cell_result(name: str, dispatcher: str, predictor: str, bsld: float,
                 host: str = "h1") -> tuple[dict[str, Any], dict[str, Any]]:
    """A campaign cell spec and its result, with every summary field the table shows."""
    spec = {"name": name, "trace": "t.swf", "trace_file": "t.swf", "system": None,
            "dispatcher": dispatcher, "predictor": predictor, "profile": "", "limit_jobs": None}
    stat = {"mean": bsld, "std": 2.0, "p50": 0.001, "p99": 0.004}
    summary = {"trace": "t.swf", "system": {"name": "8x1"}, "unit_rule": {"proc_scale": 1.0},
               "dispatcher": dispatcher, "predictor": predictor, "profile": "fast", "jobs": 10,
               "slowdown": {**stat, "mean": bsld + 1}, "bounded_slowdown": stat,
               "wait_seconds": {"mean": 30.0, "std": 5.0, "max": 7200}, "utilisation": 0.5,
               "decision_seconds": {**stat, "mean": bsld / 1000}, "replay_seconds": 1.0}
    result = {"name": name, "host": host, "worker": "", "seconds": 1.0, "summary": summary,
              "files": {}, "error": None, "traceback": None}
    return spec, result


def test_campaign_report_merges_campaigns_and_finds_easy_in_another_part(
        tmp_path: Path) -> None:
    import json

    from benchmarks.matrix.report import campaign_document, main, write_campaign

    parts = {"a": [("easy", "walltime", 10.0), ("pcp20", "walltime", 5.0)],
             "b": [("pcp19", "walltime", 8.0), ("easy", "oracle", 4.0), ("pcp20", "oracle", 1.0)]}
    for part, cells in parts.items():
        made = [_cell_result(f"{p}-{d}", d, p, b) for d, p, b in cells]
        specs = [spec for spec, _ in made]
        results = {spec["name"]: result for spec, result in made}
        meta = {"command": f"campaign {part}", "started": "now", "cluster": "here",
                "wall_seconds": 2.0}
        write_campaign(tmp_path / part, campaign_document(meta, specs, results))  # type: ignore
    with pytest.raises(SystemExit):  # merging needs --out
        main([str(tmp_path / "a"), str(tmp_path / "b")])
    assert main([str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "m")]) == 0
    merged = json.loads((tmp_path / "m" / "campaign.json").read_text())
    ratios = {e["cell"]: e["ratios_to_easy"]["bounded_slowdown"] for e in merged["cells"]}
    # pcp19 of part b is compared with part a's EASY under the same predictor
    assert ratios == {"walltime-easy": 1.0, "walltime-pcp20": 0.5, "walltime-pcp19": 0.8,
                      "oracle-easy": 1.0, "oracle-pcp20": 0.25}
    text = (tmp_path / "m" / "campaign.md").read_text()
    assert "`campaign a`" in text and "`campaign b`" in text
    assert "| t.swf | 8x1 | pcp19 | walltime | fast | 10 | 9.00 ± 2.00 | 8.00 ± 2.00 | " \
           "30 ± 5 | 2.0 | 0.500 |" in text
    assert "| t.swf | 8x1 | walltime | 10.00 (0.500, 10 ms) | 8.00 (0.500, 8 ms) | " \
           "5.00 (0.500, 5 ms) |" in text  # the matrix: easy, pcp19, pcp20 columns
    assert main([str(tmp_path / "a"), str(tmp_path / "a"), "--out", str(tmp_path / "x")]) == 2
