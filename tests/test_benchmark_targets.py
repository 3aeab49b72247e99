"""The benchmarks' outputs: target verdicts (met, or missed by how much) and campaign figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.campaign_plot import matrix, plot
from benchmarks.campaign_report import target_lines
from benchmarks.scale import target_line

LLNL = "LLNL-Atlas-2006-2.1-cln.swf.xz"


def _entry(dispatcher: str, bsld: float, util: float, decision_s: float,
           trace: str = LLNL, limit: int | None = None) -> dict[str, Any]:
    return {
        "status": "ok",
        "spec": {"trace": trace, "trace_file": trace, "system": None, "predictor": "walltime",
                 "dispatcher": dispatcher, "profile": "", "limit_jobs": limit},
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


def test_scale_target_line() -> None:
    assert "**missed** by 12.3×" in target_line(12_345.0)
    assert "**met**" in target_line(800.0)
    assert "not measured" in target_line(None)


def test_campaign_plot_groups_cells_by_trace_and_writes_both_figures(tmp_path: Path) -> None:
    cells = [_entry(d, b, u, 0.01, trace="KTH.swf.xz") for d, b, u in
             (("easy", 20.0, 0.7), ("pcp20", 10.0, 0.7))]
    cells.append({**_entry("easy", 5.0, 0.9, 0.01, trace="lublin.swf.xz"), "status": "failed"})
    for cell in cells:
        cell["summary"]["bounded_slowdown"]["std"] = 1.0
    grouped = matrix({"cells": cells})
    assert list(grouped) == ["KTH"]  # failed cells are left out
    assert grouped["KTH"][("walltime", "pcp20")] == {"bsld": 10.0, "bsld_std": 1.0, "util": 0.7}
    written = plot({"cells": cells}, tmp_path)
    assert [p.name for p in written] == ["campaign_bsld.png", "campaign_utilisation.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in written)
