"""benchmarks.qos.waits_by_width: jobs by the share of the machine they ask for, with their
waits."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.qos.waits_by_width import classes, main, width_label


def _run(folder: Path, jobs: list[tuple[int, int]], cores: int = 100) -> Path:
    """A run folder whose jobs are (cores, wait in seconds)."""
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({"system": {"cores": cores}}))
    lines = ["job_id,cores,wait"] + [f"j{k},{c},{w}" for k, (c, w) in enumerate(jobs)]
    (folder / "jobs.csv").write_text("\n".join(lines) + "\n")
    return folder


def test_width_classes_are_shares_of_the_machine() -> None:
    assert [width_label(c, 100) for c in (1, 2, 10, 11, 25, 26, 50, 51, 100)] == [
        "1 core", "1%-10%", "1%-10%", "10%-25%", "10%-25%", "25%-50%", "25%-50%", "50%-100%",
        "50%-100%"]
    assert width_label(2, 1000) == "<= 1%"


def test_each_class_counts_its_jobs_and_their_mean_and_longest_wait(tmp_path: Path) -> None:
    run = _run(tmp_path / "a", [(1, 3600), (1, 7200), (60, 36_000), (8, 0)])
    found = {c.label: (c.jobs, c.mean_wait_h, c.max_wait_h) for c in classes(run)}
    assert found == {"1 core": (2, 1.5, 2.0), "1%-10%": (1, 0.0, 0.0),
                     "50%-100%": (1, 10.0, 10.0)}
    assert [c.label for c in classes(run)] == ["1 core", "1%-10%", "50%-100%"]  # narrow first


def test_runs_are_side_by_side_and_a_class_one_lacks_is_a_dash(
    tmp_path: Path, capsys: object,
) -> None:
    a = _run(tmp_path / "x" / "01-easy", [(1, 3600), (60, 7200)])
    b = _run(tmp_path / "y" / "01-easy", [(1, 0)])
    assert main([str(a), str(b), "--markdown"]) == 0
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "| x/01-easy mean / max wait [h] | y/01-easy mean / max wait [h] |" in out
    assert "| 1 core | 1 | 1.00 / 1.0 | 0.00 / 0.0 |" in out
    assert "| 50%-100% | 1 | 2.00 / 2.0 | - |" in out
