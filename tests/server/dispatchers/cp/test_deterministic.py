"""Deterministic search: limits in CP-SAT's deterministic time make a replay reproducible.

The end-to-end test replays the same records twice, each in its own `hpcdispatch simulate`
process (its own embedded service, its own hash seed), the second with a busy loop on a core
beside it, and expects byte-identical jobs.csv (it has no wall-clock column) and the same
decisions.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ortools.sat.python import cp_model

from hpcdispatch.server.dispatchers.cp.cpsat_attempt import solve_attempt
from hpcdispatch.server.dispatchers.cp.restart_policy import (
    DETERMINISTIC_SECONDS_PER_MS,
    AttemptResult,
    SearchSettings,
    run_restart_policy,
)
from hpcdispatch.server.domain.outcome_kinds import SolveStatus
from hpcdispatch.server.domain.profiles import DEFAULT_PROFILE, resolve_settings
from hpcdispatch.server.domain.search_settings import SearchRequest

RECORDS = "0:200"  # of the bundled KTH-SP2 slice: PCP'20 searches in about 40 decisions
HOG_SECONDS = 120  # upper bound of the busy loop's life, whatever happens to the test
# Columns of decisions.csv that do not measure wall time.
DECISION_COLUMNS = ("time", "queue_length", "running_jobs", "attempts", "status", "started")


def _hard_model() -> cp_model.CpModel:
    """A model CP-SAT does not prove optimal in a few milliseconds."""
    model = cp_model.CpModel()
    xs = [model.new_int_var(0, 50, f"x{i}") for i in range(120)]
    for i in range(0, 118, 2):
        model.add(3 * xs[i] + 5 * xs[i + 1] - 7 * xs[i + 2] <= 40 + i % 13)
    model.add_all_different(xs[:40])
    model.maximize(sum((i % 17 + 1) * x for i, x in enumerate(xs)))
    return model


def _objective(values: object) -> tuple[int, float]:
    return 0, 0.0


def test_a_deterministic_attempt_cut_by_the_deadline_says_so() -> None:
    model = _hard_model()
    cut = solve_attempt(model, time.monotonic() + 0.05, None, _objective,
                        deterministic_limit=1000.0)
    assert cut.deadline_cut
    whole = solve_attempt(model, time.monotonic() + 60, None, _objective,
                          deterministic_limit=0.02)
    assert not whole.deadline_cut
    wall = solve_attempt(model, time.monotonic() + 0.05, None, _objective)
    assert not wall.deadline_cut  # wall-clock attempts are meant to end there


def test_deterministic_limits_are_not_capped_by_the_time_left() -> None:
    """δ counts deterministic time: the attempt gets δ's deterministic seconds whatever the time
    left (the deadline caps the wall clock inside the attempt); wall-clock limits are capped."""
    limits: list[float] = []

    def attempt(limit: float, best: int | None) -> AttemptResult[int]:
        limits.append(limit)
        return AttemptResult(SolveStatus.FEASIBLE, 1, 1.0)

    for deterministic in (True, False):
        settings = SearchSettings("t", delta_ms=50_000, delta_max_ms=50_000, k=1, window=10,
                                  deterministic=deterministic)
        run_restart_policy(attempt, settings, time.monotonic() + 1.0)
    assert limits[0] == pytest.approx(50_000 * DETERMINISTIC_SECONDS_PER_MS) == 2.5
    assert limits[1] <= 1.0


def test_the_request_asks_for_it_and_the_service_default_is_wall_clock() -> None:
    assert not resolve_settings(SearchRequest(), DEFAULT_PROFILE).deterministic
    assert resolve_settings(SearchRequest(overrides={"deterministic": True}),
                            DEFAULT_PROFILE).deterministic


def _simulate(out: Path, *extra: str) -> None:
    command = [sys.executable, "-m", "hpcdispatch", "simulate", "--records", RECORDS,
               "--dispatcher", "pcp20", "--predictor", "walltime", "--no-progress",
               "--out", str(out), *extra]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "PYTHONHASHSEED": "random"})
    assert done.returncode == 0, done.stderr[-2000:]


def _decisions(run: Path) -> list[tuple[str, ...]]:
    with (run / "decisions.csv").open(newline="") as handle:
        return [tuple(row[c] for c in DECISION_COLUMNS) for row in csv.DictReader(handle)]


def test_a_replay_beside_a_cpu_hog_makes_the_same_decisions(tmp_path: Path) -> None:
    _simulate(tmp_path / "quiet")
    hog = subprocess.Popen([
        sys.executable, "-c",
        f"import time\nend = time.monotonic() + {HOG_SECONDS}\n"
        "while time.monotonic() < end:\n    pass\n",
    ])
    try:
        _simulate(tmp_path / "loaded")
    finally:
        hog.kill()
        hog.wait()
    quiet, loaded = tmp_path / "quiet" / "01-pcp20", tmp_path / "loaded" / "01-pcp20"
    assert json.loads((loaded / "summary.json").read_text())["deterministic_search"]
    decisions = _decisions(quiet)
    assert any(int(attempts) > 0 for _, _, _, attempts, _, _ in decisions)  # it did search
    assert _decisions(loaded) == decisions
    assert (loaded / "jobs.csv").read_bytes() == (quiet / "jobs.csv").read_bytes()
