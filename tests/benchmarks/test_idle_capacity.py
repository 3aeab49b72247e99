"""benchmarks.qos.idle_capacity on hand-made job records whose idle time is known."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.qos.idle_capacity import idle_shares


def _run(tmp_path: Path, rows: list[tuple[int, int, int, int]]) -> Path:
    (tmp_path / "summary.json").write_text(json.dumps({"system": {"nodes": 2, "cores": 2}}))
    lines = ["job_id,submit,start,end,cores"]
    lines += [f"j{i},{q},{s},{e},{c}" for i, (q, s, e, c) in enumerate(rows)]
    (tmp_path / "jobs.csv").write_text("\n".join(lines) + "\n")
    return tmp_path


def test_idle_while_a_queued_job_fits(tmp_path: Path) -> None:
    # 2 cores over [0, 20). A holds one core over [0, 10); C (1 core) waits until 5 although
    # the other core is idle; B (2 cores) waits until 10. Idle: 1 core over [0, 5) = 5 of 40.
    run = _run(tmp_path, [(0, 0, 10, 1), (0, 5, 10, 1), (0, 10, 20, 2)])
    assert idle_shares(run) == pytest.approx((0.125, 0.125))


def test_idle_that_no_queued_job_could_use(tmp_path: Path) -> None:
    # Without C, the idle core over [0, 10) is too small for B: idle, but not while B fits.
    run = _run(tmp_path, [(0, 0, 10, 1), (0, 10, 20, 2)])
    assert idle_shares(run) == pytest.approx((0.25, 0.0))
