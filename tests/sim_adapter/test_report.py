"""`hpcdispatch report`: the tail in the tables, sequence ids, re-running over a glob, and
plots of a readable size, on run folders written here (summary.json, jobs.csv,
decisions.csv as a replay writes them)."""

from __future__ import annotations

import csv
import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest

from hpcdispatch.cli import main
from hpcdispatch.sim_adapter.outputs import DECISION_COLUMNS, JOB_COLUMNS, RunRecorder
from hpcdispatch.sim_adapter.records import JobRecord
from hpcdispatch.sim_adapter.report import comparison_table, find_runs, write_plots
from hpcdispatch.sim_adapter.report_plots import binned_queue, series_of
from hpcdispatch.sim_adapter.sequences import aggregate_table

HOUR = 3600


def write_run(folder: Path, label: str, waits: list[int], runs: list[int],
              sequence: int | None = None) -> Path:
    """A run folder whose summary.json has only what a replay before the tail figures wrote
    (no percentiles): the report has to take them from jobs.csv."""
    folder.mkdir(parents=True)
    slowdowns = [max((w + r) / max(r, 10), 1.0) for w, r in zip(waits, runs, strict=True)]
    with (folder / "jobs.csv").open("w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(JOB_COLUMNS)
        for i, (w, r, b) in enumerate(zip(waits, runs, slowdowns, strict=True)):
            out.writerow((i, "u1", 100 * i, 100 * i + w, 100 * i + w + r, w, r, r, r, 0,
                          f"{(w + r) / r:.6g}", f"{b:.6g}", 1, 1, 1, "n1"))
    with (folder / "decisions.csv").open("w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(DECISION_COLUMNS)
        for i in range(0, 200):  # 200 decisions, 10 min apart: 33 h
            out.writerow((600 * i, i % 17, 1, "easy", "walltime", "", 0, "optimal", 0, 0, 1,
                          f"{0.001 * (1 + i % 5):.6f}", "0.002", ""))
    summary = {
        "label": label, "jobs": len(waits),
        "wait_seconds": {"mean": float(np.mean(waits)), "std": 0.0, "max": max(waits)},
        "bounded_slowdown": {"mean": float(np.mean(slowdowns)), "std": 0.0,
                             "max": max(slowdowns)},
        "slowdown": {"mean": 1.0, "std": 0.0, "max": 1.0},
        "utilisation": 0.5, "makespan_seconds": 7200, "decisions": 200,
        "decision_seconds": {"p50": 0.003, "p99": 0.005, "max": 0.005},
    }
    if sequence is not None:
        summary["sequence"] = {"index": sequence, "start": 1000 + sequence, "length": len(waits),
                               "seed": 1, "repeat": 1}
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


def table_rows(text: str) -> dict[str, dict[str, str]]:
    """{run name: {header: cell}} of each fixed-width table in `text`."""
    rows: dict[str, dict[str, str]] = {}
    for block in text.strip().split("\n\n"):
        lines = block.splitlines()
        header = re.split(r"\s{2,}", lines[0].strip())
        for line in lines[2:]:
            cells = re.split(r"\s{2,}", line.strip())
            rows.setdefault(cells[0], {}).update(zip(header[1:], cells[1:], strict=True))
    return rows


WAITS = [0, 0, 5, 60, 600, 1200, 3600, 7200, 7300, 20_000, 30_000, 45_000, 50_000, 86_000,
         90_000, 100, 200, 300, 400, 500]
RUNS = [100, 5, 3600, 60, 600, 1800, 7200, 100, 30, 3600, 600, 60, 120, 43_200, 900, 10, 20,
        30, 40, 50]


def test_tables_show_p50_p95_p99_and_the_longest_wait_from_jobs_csv(tmp_path: Path) -> None:
    write_run(tmp_path / "01-easy", "easy-walltime", WAITS, RUNS)
    text = comparison_table([r.summary for r in find_runs([tmp_path])])
    row = table_rows(text)["easy-walltime"]
    # Computed here with numpy (linear interpolation), not with the report's code.
    waits = np.array(WAITS, dtype=float)
    slowdowns = np.maximum((waits + RUNS) / np.maximum(RUNS, 10), 1)
    assert row["p95 wait [h]"] == f"{np.percentile(waits, 95) / HOUR:,.2f}"
    assert row["p99 wait [h]"] == f"{np.percentile(waits, 99) / HOUR:,.2f}"
    assert row["max wait [h]"] == f"{90_000 / HOUR:,.2f}" == "25.00"
    assert row["p50 bsld"] == f"{np.percentile(slowdowns, 50):,.2f}"
    assert row["p95 bsld"] == f"{np.percentile(slowdowns, 95):,.1f}"
    assert row["p99 bsld"] == f"{np.percentile(slowdowns, 99):,.1f}"
    assert row["mean bsld"] == f"{slowdowns.mean():,.2f}"
    assert row["dec p50 [ms]"] == "3.0"


def test_a_summary_with_its_own_percentiles_is_taken_as_written(tmp_path: Path) -> None:
    run = write_run(tmp_path / "01-easy", "easy-walltime", WAITS, RUNS)
    summary = json.loads((run / "summary.json").read_text())
    summary["wait_seconds"].update(p50=1.0, p95=2 * HOUR, p99=3 * HOUR)
    summary["bounded_slowdown"].update(p50=1.0, p95=7.0, p99=9.0)
    (run / "summary.json").write_text(json.dumps(summary))
    row = table_rows(comparison_table([r.summary for r in find_runs([run])]))["easy-walltime"]
    assert (row["p95 wait [h]"], row["p99 wait [h]"], row["p99 bsld"]) == ("2.00", "3.00", "9.0")


def sequence_runs(root: Path, count: int = 3) -> Path:
    rng = np.random.default_rng(7)
    for d, label in enumerate(("easy-walltime", "pcp20-walltime"), 1):
        for k in range(count):
            waits = [int(w) for w in rng.integers(0, 40_000 * (k + 1), size=30)]
            write_run(root / f"{d:02d}-{label}-seq{k + 1:02d}", label, waits, [600] * 30,
                      sequence=k)
    return root


def test_sequence_runs_are_named_by_sequence_and_aggregated_per_dispatcher(
        tmp_path: Path) -> None:
    runs = find_runs([sequence_runs(tmp_path)])
    summaries = [r.summary for r in runs]
    rows = table_rows(comparison_table(summaries))
    assert list(rows) == ["seq01 easy-walltime", "seq01 pcp20-walltime",
                          "seq02 easy-walltime", "seq02 pcp20-walltime",
                          "seq03 easy-walltime", "seq03 pcp20-walltime"]
    aggregated = table_rows(aggregate_table(summaries))
    assert list(aggregated) == ["easy-walltime", "pcp20-walltime"]
    for label, row in aggregated.items():
        assert row["runs"] == "3"
        longest = max(r.summary["wait_seconds"]["max"] for r in runs if r.label == label)
        assert row["max wait [h]"] == f"{longest / HOUR:,.2f}"
        p99s = [r.summary["wait_seconds"]["p99"] / HOUR for r in runs if r.label == label]
        assert row["p99 wait [h]"].startswith(f"{np.mean(p99s):,.2f} ± ")


def png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", header[16:24])
    return width, height


def test_a_second_report_over_a_glob_skips_the_report_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = sequence_runs(tmp_path / "runs", count=2)
    assert main(["report", *map(str, sorted(root.iterdir()))]) == 0
    assert (root / "report" / "sequences.png").exists()
    capsys.readouterr()
    glob = sorted(root.iterdir())  # now with report/, as `runs/kth/*` has the second time
    assert root / "report" in glob
    assert main(["report", *map(str, glob)]) == 0
    captured = capsys.readouterr()
    assert f"skipped {root / 'report'}: no summary.json" in captured.err
    assert "seq02 pcp20-walltime" in captured.out
    assert main(["report", str(root / "report")]) == 2  # nothing but the report: an error
    assert "no summary.json" in capsys.readouterr().err


@pytest.mark.parametrize("sequences", [False, True])
def test_plots_are_written_at_a_readable_size(tmp_path: Path, sequences: bool) -> None:
    if sequences:
        runs = find_runs([sequence_runs(tmp_path / "runs", count=10)])
    else:
        runs = find_runs([write_run(tmp_path / "runs" / f"{k:02d}", f"d{k}-walltime", WAITS,
                                    RUNS) for k in range(12)])
    written = write_plots(runs, tmp_path / "plots")
    names = sorted(p.name for p in written)
    expected = ["decision_time.png", "queue_length.png", "slowdown_wait.png"]
    assert names == sorted(expected + (["sequences.png"] if sequences else []))
    for path in written:
        width, height = png_size(path)
        assert 800 <= width <= 1200 and 200 <= height <= 1600, (path.name, width, height)


def test_every_series_has_its_own_colour(tmp_path: Path) -> None:
    for count in (3, 12, 25):
        runs = find_runs([write_run(tmp_path / f"{count}" / f"{k:02d}", f"d{k}", [0], [10])
                          for k in range(count)])
        colours = [tuple(s.colour) for s in series_of(runs)]
        assert len(set(colours)) == count


def test_a_replay_summary_carries_the_percentiles_of_wait_and_bounded_slowdown() -> None:
    recorder = RunRecorder(None)
    for i, (wait, run) in enumerate(zip(WAITS, RUNS, strict=True)):
        recorder.job_finished(JobRecord(str(i), "u1", 0, wait, wait + run, run, run, False, 1,
                                        1, ("n1",)))
    summary = recorder.summary(first_submit=0, last_end=1, total_cores=1, replay_seconds=0.0,
                               meta={}, cleaning={})
    waits = np.array(WAITS, dtype=float)
    slowdowns = np.maximum((waits + RUNS) / np.maximum(RUNS, 10), 1)
    for q in (50, 95, 99):
        assert summary["wait_seconds"][f"p{q}"] == pytest.approx(np.percentile(waits, q))
        assert summary["bounded_slowdown"][f"p{q}"] == pytest.approx(np.percentile(slowdowns, q))
    assert summary["wait_seconds"]["max"] == 90_000


def test_the_queue_length_plot_keeps_the_last_partial_bin() -> None:
    """Issue #43: decisions over 2.5 hours in hour bins made two bins, the last half hour
    (here its largest queue) dropped."""
    hour = 3600.0
    times = [0.0, 0.5 * hour, 2.0 * hour, 2.25 * hour, 2.5 * hour]
    queue = [10, 30, 50, 70, 0]
    starts, mean, low, high = binned_queue(times, queue, hour)
    assert starts.tolist() == [0.0, hour, 2 * hour]
    assert mean.tolist() == [20.0, 30.0, 60.0]  # the last bin: 50 then 70, a quarter hour each
    assert (low.tolist(), high.tolist()) == ([10.0, 30.0, 50.0], [30.0, 30.0, 70.0])
    one = binned_queue([5.0], [4], hour)  # a single decision: one bin of its queue
    assert [a.tolist() for a in one] == [[0.0], [4.0], [4.0], [4.0]]
