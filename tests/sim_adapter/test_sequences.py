"""RLScheduler's sampling protocol, record windows and the aggregated report."""

from __future__ import annotations

import csv
import hashlib
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from hpcdispatch.cli import main
from hpcdispatch.sim_adapter.record_window import parse_window
from hpcdispatch.sim_adapter.replay import resolve_trace
from hpcdispatch.sim_adapter.sequences import (
    aggregate,
    aggregate_table,
    draw_sequences,
    draw_starts,
    rlscheduler_jobs,
)

LUBLIN = resolve_trace("lublin-256")  # shipped in the package (sim_adapter/data)


def gym_starts(job_count: int, count: int, length: int, seed: int) -> list[int]:
    """The draws spelled out as gym (< 0.22) seeds and RLScheduler's reset_for_test draws: the
    8-byte hash prefix padded to whole 32-bit words (gym pads a full extra word), unpacked as
    native unsigned ints, reassembled, split again into 32-bit words, then one
    randint(L, jobs - L - 1) per sequence."""
    digest = hashlib.sha512(str(seed % 2**64).encode("utf8")).digest()[:8]
    padded = digest + b"\0" * (4 - len(digest) % 4)
    ints = struct.unpack(f"{len(padded) // 4}I", padded)
    big = sum(2 ** (32 * i) * v for i, v in enumerate(ints))
    words = []
    while big > 0:
        big, mod = divmod(big, 2**32)
        words.append(mod)
    rng = np.random.RandomState()
    rng.seed(words or [0])
    return [rng.randint(length, job_count - length - 1) for _ in range(count)]


@pytest.mark.parametrize("seed", [0, 1, 7, 2**40])
def test_starts_are_drawn_as_rlscheduler_draws_them(seed: int) -> None:
    assert draw_starts(10_000, 10, 1024, seed) == gym_starts(10_000, 10, 1024, seed)
    starts = draw_starts(10_000, 50, 1024, seed)
    assert all(1024 <= s < 10_000 - 1024 - 1 for s in starts)


def test_seeds_differ_and_short_traces_are_refused() -> None:
    assert draw_starts(10_000, 10, 1024, 1) != draw_starts(10_000, 10, 1024, 2)
    with pytest.raises(ValueError, match="too short"):
        draw_starts(2049, 1, 1024, 1)


def test_record_windows_parse_as_slices() -> None:
    assert parse_window("10:20") == range(10, 20)
    for bad in ("20:10", "5:5", "-1:3", "7", "a:b"):
        with pytest.raises(ValueError, match="record window"):
            parse_window(bad)


def test_aggregate_is_mean_and_sample_std_per_label() -> None:
    runs = [{"label": "a", "bounded_slowdown": {"mean": v}} for v in (1.0, 3.0)]
    runs.append({"label": "b", "bounded_slowdown": {"mean": 5.0}})
    rows = {r["label"]: r for r in aggregate(runs)}
    assert rows["a"]["runs"] == 2 and rows["a"]["mean bsld"] == (2.0, pytest.approx(2**0.5))
    assert rows["b"]["mean bsld"] == (5.0, 0.0)
    assert "2.00 ± 1.41" in aggregate_table(runs)


def test_lublin_job_list_is_the_file_order() -> None:
    jobs = rlscheduler_jobs(LUBLIN)
    assert jobs == list(range(10_000))  # no zero run time, sorted by job number


def test_short_sequences_of_lublin_replay_alone(tmp_path: Path) -> None:
    """Three sequences of 48 jobs, EASY and EASY-SJF: each run replays exactly the drawn jobs
    on an empty machine, and the report aggregates the three per dispatcher."""
    out = tmp_path / "runs"
    code = main([
        "simulate", "--trace", str(LUBLIN), "--sequences", "3", "--sequence-length", "48",
        "--seed", "1", "--dispatcher", "easy", "--dispatcher", "easy-sjf", "--no-progress",
        "--out", str(out),
    ])
    assert code == 0
    starts = gym_starts(10_000, 3, 48, 1)
    assert [s.start for s in draw_sequences(LUBLIN, 3, 48, 1)] == starts
    summaries = [json.loads(p.read_text()) for p in sorted(out.glob("*/summary.json"))]
    assert len(summaries) == 6
    for summary, start in zip(summaries, starts * 2, strict=True):
        assert summary["sequence"] == {"index": starts.index(start), "start": start,
                                       "length": 48, "seed": 1, "repeat": 1}
        assert summary["records"] == {"first": start, "last": start + 48, "count": 48}
        assert summary["predictor"] == "walltime"
        assert summary["jobs"] == 48
    # Lublin's job numbers are 1-based record ordinals: the jobs of records start .. start+47.
    first_run = sorted(out.glob("01-easy-seq01-*"))[0]
    with (first_run / "jobs.csv").open(newline="") as handle:
        ids = sorted(int(row["job_id"]) for row in csv.DictReader(handle))
    assert ids == list(range(starts[0] + 1, starts[0] + 49))
    rows = {r["label"]: r for r in aggregate(summaries)}
    assert {label: r["runs"] for label, r in rows.items()} == {
        "easy-walltime": 3, "easy-sjf-walltime": 3}
