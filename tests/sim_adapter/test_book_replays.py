"""The promise book replayed where it used to fail (issue #49): on lublin_256_est, whose users
over-state their run times, under the default predictor it stalled ("starts none of 12 queued
jobs ... on an idle system"; a stalled replay raises SimulationError, so it fails here), and
its promises were late by hours under predictions. Now every replay runs to the end without a
fallback, and no job starts after its first promise under walltime, last-two or data-driven.
Deterministic search limits: the same decisions however loaded the machine is."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from hpcdispatch.sim_adapter.adapter import DispatchSettings
from hpcdispatch.sim_adapter.in_process_backend import LocalService
from hpcdispatch.sim_adapter.replay import RunSpec, bundled_trace, replay, resolve_trace

LUBLIN_EST = resolve_trace("lublin-256-est")


@pytest.fixture(scope="module")
def local() -> LocalService:
    return LocalService()


def kept_everywhere(path: Path, summary: dict[str, object]) -> list[dict[str, str]]:
    """The jobs that held a promise; each started at or before its first one."""
    with (path / "jobs.csv").open(newline="") as handle:
        jobs = [r for r in csv.DictReader(handle) if r["first_promised_start"]]
    late = [r["job_id"] for r in jobs if int(r["start"]) > int(r["first_promised_start"])]
    assert late == [], f"{len(late)} of {len(jobs)} promises late"
    assert summary["fallback_decisions"] == 0
    return jobs


@pytest.mark.parametrize("predictor", ["walltime", "last-two", "data-driven"])
def test_the_books_promises_are_kept_on_the_kth_slice(
    predictor: str, local: LocalService, tmp_path: Path,
) -> None:
    spec = RunSpec(bundled_trace(), DispatchSettings(dispatcher="pcp20", predictor=predictor,
                                                     profile="book"), limit_jobs=400)
    summary = replay(spec, local, tmp_path)
    assert len(kept_everywhere(tmp_path, summary)) >= 5


@pytest.mark.parametrize(("dispatcher", "predictor"),
                         [("pcp20", "data-driven"), ("pcp19", "data-driven"),
                          ("pcp20", "last-two")])
def test_the_stall_window_replays_to_the_end_with_its_promises_kept(
    dispatcher: str, predictor: str, local: LocalService, tmp_path: Path,
) -> None:
    # Records 0:800 hold the first stall of records 0:1500 (t = 690,960, jobs 540-726).
    spec = RunSpec(LUBLIN_EST, DispatchSettings(dispatcher=dispatcher, predictor=predictor,
                                                profile="book"), records=range(800))
    summary = replay(spec, local, tmp_path)  # a stall raises SimulationError
    assert summary["jobs"] == 800
    assert len(kept_everywhere(tmp_path, summary)) >= 10
