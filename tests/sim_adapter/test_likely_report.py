"""`hpcdispatch report` on a small run written here as a replay writes it (RunRecorder: jobs.csv
and summary.json): the share of promises kept, the likely start's error beside them (median
absolute, share within 1 h) and the promises' moves later by reason (issue #49, item 2)."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

from hpcdispatch.cli import main
from hpcdispatch.sim_adapter.outputs import RunRecorder, write_summary
from hpcdispatch.sim_adapter.records import JobRecord
from hpcdispatch.sim_adapter.report_promises import _caption
from tests.sim_adapter.test_report import table_rows

HOUR = 3600


def job(job_id: str, start: int, first: int | None, promise: int | None,
        likely: int | None = None, moves: tuple[tuple[int, str], ...] = ()) -> JobRecord:
    """A job submitted at 0 that started at `start`, first reported `first`, promised
    `promise` with `likely` beside it, its promise moved later by `moves`."""
    return JobRecord(
        job_id, "u", 0, start, start + 600, 600, 600, False, 1, 1, ("n1",),
        first_reported_start=first, first_reported_promised=promise is not None and
        first == promise, first_promised_start=promise, first_promised_likely_start=likely,
        promise_moves=len(moves), promise_moved_later_seconds=sum(s for s, _ in moves),
        promise_move_reasons=tuple(reason for _, reason in moves))


# Four promised jobs: two kept (likely 600 s and 0 s off), two late (a node went down: 9,000 s
# off its likely start; a job ran past its limit twice: no likely start given); one estimate
# only; one that never waited at a decision.
JOBS = (
    job("kept-early", 1_000, 1_000, 1_000, likely=400),
    job("kept-exact", 5_000, 5_000, 9_000, likely=5_000),
    job("node-down", 10_000, 2_000, 2_000, likely=1_000,
        moves=((8_000, "node_unavailable"),)),
    job("past-limit", 8_000, 7_000, 7_000, moves=((300, "ran_past_limit"),
                                                 (700, "ran_past_limit"))),
    job("estimated", 3_000, 2_500, None),
    job("no-wait", 0, None, None),
)


def write_run(folder: Path) -> dict:
    recorder = RunRecorder(folder)
    for record in JOBS:
        recorder.job_finished(record)
    recorder.close()
    summary = recorder.summary(first_submit=0, last_end=10_600, total_cores=1,
                               replay_seconds=1.0, meta={"label": "book-walltime"}, cleaning={})
    write_summary(folder / "summary.json", summary)
    return summary


def test_the_summary_gives_promises_kept_the_likely_starts_error_and_moves_by_reason(
    tmp_path: Path,
) -> None:
    accuracy = write_run(tmp_path / "run")["promise_accuracy"]
    assert accuracy["reported_jobs"] == 5
    assert (accuracy["promised"]["jobs"], accuracy["promised"]["on_time_share"]) == (4, 0.5)
    likely = accuracy["likely"]  # |error| 600, 0 and 9,000 s
    assert likely["jobs"] == 3
    assert likely["drift_seconds"]["p50"] == 600
    assert likely["within_hour_share"] == pytest.approx(2 / 3)
    assert accuracy["moved"] == {"jobs": 2, "moves": 3,
                                 "by_reason": {"node_unavailable": 1, "ran_past_limit": 2}}
    with (tmp_path / "run" / "jobs.csv").open(newline="") as handle:
        rows = {r["job_id"]: r for r in csv.DictReader(handle)}
    assert rows["kept-early"]["first_promised_likely_start"] == "400"
    assert rows["past-limit"]["first_promised_likely_start"] == ""
    assert (rows["past-limit"]["promise_moves"], rows["past-limit"]["promise_moved_later_seconds"],
            rows["past-limit"]["promise_move_reasons"]) == ("2", "1000",
                                                            "ran_past_limit ran_past_limit")


def test_report_prints_them_and_the_plot_captions_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    write_run(tmp_path / "runs" / "01-book")
    assert main(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "report")]) == 0
    printed = capsys.readouterr().out
    table = printed[printed.index("starts reported while jobs waited"):].split("\n", 1)[1]
    row = table_rows("\n".join(table.splitlines()[:3]))["book-walltime"]  # header, rule, row
    assert (row["promised"], row["kept %"], row["moved later"]) == ("4", "50.0", "3")
    assert (row["likely |err| p50 [h]"], row["likely <=1h %"]) == ("0.17", "66.7")
    assert (tmp_path / "report" / "promises.png").exists()
    # The caption of its panel, on the waits as recorded (hours), promises and estimates.
    first = np.asarray([1_000, 9_000, 2_000, 7_000, 2_500]) / HOUR
    actual = np.asarray([1_000, 5_000, 10_000, 8_000, 3_000]) / HOUR
    promised = np.asarray([True, True, True, True, False])
    likely = np.asarray([400, 5_000, 1_000, np.nan, np.nan]) / HOUR
    assert _caption(first, actual, promised, likely) == (
        "4 promised, 50.0% kept, likely |err| p50 0.17 h, 67% within 1 h; "
        "1 estimated, 0.0% on time")
