"""Replays record the starts the decisions reported while jobs waited (jobs.csv's
first_reported_start, first_reported_promised, first_promised_start) and how they were kept
(summary.json's promise_accuracy, `hpcdispatch report`'s table and promises.png), on the
bundled KTH-SP2 slice, in-process and through the real service on loopback.

Under walltime estimates a running job ends at or before its expected end, so every promise
is kept: conservative's reservations, EASY's and EASY-k's head reservation and the promise
book's (profile `book`). EASY with SJF's order only estimates its head's start (a shorter job
may take its place), and EASY-k's reservations after the head are estimates."""

from __future__ import annotations

import csv
import dataclasses
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from hpcdispatch.cli import main
from hpcdispatch.sim_adapter.adapter import DispatchSettings
from hpcdispatch.sim_adapter.in_process_backend import LocalService
from hpcdispatch.sim_adapter.outputs import JOB_COLUMNS, PromiseAccuracy
from hpcdispatch.sim_adapter.records import JobRecord
from hpcdispatch.sim_adapter.replay import RunSpec, bundled_trace, replay
from tests.processes import quiet_embedded_service

LIMIT = 600  # jobs of the bundled slice: queues form and many jobs wait
NEW_COLUMNS = ("first_reported_start", "first_reported_promised", "first_promised_start")
# Appended by issue #49: the likely start beside the first promise, the promise's moves later.
LIKELY_COLUMNS = ("first_promised_likely_start", "promise_moves", "promise_moved_later_seconds",
                  "promise_move_reasons")
PROMISING = (("conservative", ""), ("easy", ""), ("easy-k", ""), ("los", ""),
             ("pcp20", "book"))


@pytest.fixture(scope="module")
def target() -> Iterator[str]:
    with quiet_embedded_service() as address:
        yield address


@pytest.fixture(scope="module")
def local() -> LocalService:
    return LocalService()


def spec_of(dispatcher: str, profile: str = "", predictor: str = "walltime") -> RunSpec:
    return RunSpec(bundled_trace(), DispatchSettings(dispatcher=dispatcher, predictor=predictor,
                                                     profile=profile), limit_jobs=LIMIT)


def read_jobs(path: Path) -> list[dict[str, str]]:
    with (path / "jobs.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_the_new_columns_follow_the_old_ones_in_their_order() -> None:
    assert JOB_COLUMNS[:16] == (
        "job_id", "user", "submit", "start", "end", "wait", "run", "requested_time",
        "predicted", "killed", "slowdown", "bounded_slowdown", "units", "cores", "node_count",
        "nodes")
    assert JOB_COLUMNS[16:] == (*NEW_COLUMNS, *LIKELY_COLUMNS, "partitions")


@pytest.mark.parametrize(("dispatcher", "profile"), PROMISING)
def test_every_promise_is_kept_under_walltime_estimates_on_both_paths(
    dispatcher: str, profile: str, target: str, local: LocalService, tmp_path: Path,
) -> None:
    spec = spec_of(dispatcher, profile)
    grpc_summary = replay(spec, target, tmp_path / "grpc")
    summary = replay(spec, local, tmp_path / "in-process")
    assert (grpc_summary["path"], summary["path"]) == ("grpc-stream", "in-process")
    # Both paths report the same starts for the same jobs.
    assert (tmp_path / "grpc" / "jobs.csv").read_bytes() == (
        tmp_path / "in-process" / "jobs.csv").read_bytes()
    assert grpc_summary["promise_accuracy"] == summary["promise_accuracy"]
    jobs = read_jobs(tmp_path / "in-process")
    promised = [r for r in jobs if r["first_promised_start"]]
    assert len(promised) >= 10, "too few waiting jobs to say anything"
    for row in promised:  # a promise is a start after a decision at which the job waited
        assert int(row["submit"]) < int(row["first_promised_start"])
        assert int(row["start"]) <= int(row["first_promised_start"]), row["job_id"]
    accuracy = summary["promise_accuracy"]
    assert accuracy["promised"]["jobs"] == len(promised)
    assert accuracy["promised"]["on_time_share"] == 1.0
    assert accuracy["promised"]["late_jobs"] == 0
    assert accuracy["reported_jobs"] == sum(1 for r in jobs if r["first_reported_start"])
    never_waited = [r for r in jobs if r["wait"] == "0"]
    assert never_waited and all(
        r["first_reported_start"] == r["first_reported_promised"] == r["first_promised_start"]
        == "" for r in never_waited)


def test_easy_k_promises_its_head_and_estimates_the_reservations_after_it(
    local: LocalService, tmp_path: Path,
) -> None:
    summary = replay(spec_of("easy-k"), local, tmp_path)
    jobs = read_jobs(tmp_path)
    first_estimated = [r for r in jobs if r["first_reported_promised"] == "0"]
    later_promised = [r for r in first_estimated if r["first_promised_start"]]
    # A reservation behind the head first, the head's later (not always earlier: a
    # reservation behind the head may move later, which is why it is only an estimate).
    assert first_estimated and later_promised
    assert summary["promise_accuracy"]["estimated"]["jobs"] == sum(
        1 for r in first_estimated if not r["first_promised_start"])


def test_easy_sjf_reports_its_head_as_an_estimate_which_may_be_missed(
    local: LocalService, tmp_path: Path,
) -> None:
    accuracy = replay(spec_of("easy-sjf"), local, tmp_path)["promise_accuracy"]
    assert accuracy["promised"]["jobs"] == 0
    estimated = accuracy["estimated"]
    assert estimated["jobs"] > 0
    jobs = [r for r in read_jobs(tmp_path) if r["first_reported_start"]]
    late = sorted(int(r["start"]) - int(r["first_reported_start"]) for r in jobs
                  if int(r["start"]) > int(r["first_reported_start"]))
    assert estimated["late_jobs"] == len(late)
    if late:
        assert estimated["late_seconds"]["max"] == late[-1]


def test_under_predictions_a_reservation_is_an_estimate_and_its_lateness_is_jobs_csvs(
    local: LocalService, tmp_path: Path,
) -> None:
    """last-two under-predicts some jobs: a reservation planned on them may be missed, so
    conservative shows it as an estimate (issue #49), a promise only from a decision whose
    every duration is its requested time (a few, before users have a history), and no promise
    is late; the summary's lateness of the estimates comes from the same first reported starts
    and starts as jobs.csv's."""
    accuracy = replay(spec_of("conservative", predictor="last-two"), local,
                      tmp_path)["promise_accuracy"]
    promised = accuracy["promised"]
    assert promised["jobs"] == 0 or promised["late_jobs"] == 0, promised
    estimated = accuracy["estimated"]
    jobs = [r for r in read_jobs(tmp_path)
            if r["first_reported_start"] and not r["first_promised_start"]]
    assert len(jobs) > 10 * promised["jobs"]
    late = sorted(int(r["start"]) - int(r["first_reported_start"]) for r in jobs
                  if int(r["start"]) > int(r["first_reported_start"]))
    assert late, "last-two misses no estimate on this slice: pick a case that does"
    assert estimated["late_jobs"] == len(late)
    assert estimated["late_seconds"]["max"] == late[-1]


def record(submit: int, start: int, reported: int | None, promised: int | None,
           first_is_promise: bool) -> JobRecord:
    return JobRecord("j", "u", submit, start, start + 10, 10, 10, False, 1, 1, ("n1",),
                     reported, first_is_promise, promised)


def test_promise_accuracy_counts_promises_against_the_first_promise_and_estimates_apart() -> None:
    accuracy = PromiseAccuracy()
    accuracy.add(record(0, 50, None, None, False))  # never waited at a decision: not counted
    accuracy.add(record(0, 100, 100, 100, True))  # kept exactly
    accuracy.add(record(0, 100, 200, 200, True))  # kept, 100 s early
    accuracy.add(record(0, 400, 300, 300, True))  # 100 s late
    accuracy.add(record(0, 900, 50, 600, False))  # estimate, then a promise 300 s late
    accuracy.add(record(0, 1000, 400, None, False))  # an estimate only: 600 s late
    accuracy.add(record(0, 100, 400, None, False))  # an estimate only: 300 s early
    summary = accuracy.as_dict()
    assert summary["reported_jobs"] == 6
    promised = summary["promised"]  # drifts 0, 100, 100, 300 s; late 100, 300 s
    assert (promised["jobs"], promised["on_time_share"], promised["late_jobs"]) == (4, 0.5, 2)
    assert promised["late_seconds"] == pytest.approx({"p50": 200.0, "p95": 290.0,
                                                      "max": 300.0})
    assert promised["drift_seconds"] == pytest.approx({"p50": 100.0, "p95": 270.0,
                                                       "max": 300.0})
    estimated = summary["estimated"]  # drifts 300, 600 s; late 600 s
    assert (estimated["jobs"], estimated["on_time_share"], estimated["late_jobs"]) == (2, 0.5, 1)
    assert estimated["late_seconds"] == {"p50": 600.0, "p95": 600.0, "max": 600.0}
    assert estimated["drift_seconds"] == pytest.approx({"p50": 450.0, "p95": 585.0,
                                                        "max": 600.0})


def png_size(path: Path) -> tuple[int, int]:
    width, height = struct.unpack(">II", path.read_bytes()[16:24])
    return width, height


def test_report_prints_how_starts_were_kept_and_draws_first_promise_against_start(
    local: LocalService, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    runs = tmp_path / "runs"
    replay(spec_of("conservative"), local, runs / "01-conservative")
    replay(spec_of("easy-sjf"), local, runs / "02-easy-sjf")
    replay(spec_of("fcfs"), local, runs / "03-fcfs")
    assert main(["report", str(runs), "--out", str(tmp_path / "report")]) == 0
    printed = capsys.readouterr().out
    table = printed[printed.index("starts reported while jobs waited"):]
    rows = {line.split()[0]: line.split() for line in table.splitlines()[3:5]}
    assert rows["conservative-walltime"][2] == "100.0"  # kept %
    assert rows["easy-sjf-walltime"][1] == "0"  # no promise, only estimates
    assert "(no start reported: fcfs-walltime)" in table
    assert png_size(tmp_path / "report" / "promises.png")[0] == 1100


def test_report_of_runs_without_reported_starts_has_no_promise_table_or_plot(
    local: LocalService, tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    replay(dataclasses.replace(spec_of("fcfs"), limit_jobs=100), local, tmp_path / "fcfs")
    assert main(["report", str(tmp_path / "fcfs"), "--out", str(tmp_path / "report")]) == 0
    assert "starts reported" not in capsys.readouterr().out
    assert not (tmp_path / "report" / "promises.png").exists()
    assert (tmp_path / "report" / "slowdown_wait.png").exists()


def test_the_plots_caption_counts_on_the_recorded_waits_not_the_drawn_ones() -> None:
    """Waits under a minute are drawn at one minute; a job 20 s late on a 30 s promise is
    still late in the panel's caption, as in the summary."""
    from hpcdispatch.sim_adapter.report_promises import _caption

    first = np.asarray([30.0, 600.0, 600.0]) / 3600
    actual = np.asarray([50.0, 500.0, 700.0]) / 3600
    assert _caption(first, actual, np.asarray([True, True, False])) == (
        "2 promised, 50.0% kept; 1 estimated, 0.0% on time")
