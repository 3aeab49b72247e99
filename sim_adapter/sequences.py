"""RLScheduler's evaluation protocol: short job sequences drawn from a trace, each on an empty
machine, and their results aggregated (mean ± std).

RLScheduler (Zhang et al., SC'20) evaluates a scheduler on N sequences of L consecutive jobs
of a trace (its published tables: N = 10, L = 1,024, seed 1). Its script seeds the
environment once and draws one start index per sequence, in order:

- the job list is the trace's records with run time != 0 (a negative run time counts as
  10 s), sorted by job number; index k is the k-th job of that list;
- the generator is OpenAI Gym's `seeding.np_random(seed)` of the time (before gym 0.22): a
  NumPy `RandomState` seeded with the first 8 bytes of SHA-512(str(seed mod 2^64)), read as a
  little-endian integer and split into 32-bit words, lowest first;
- each start is `randint(L, jobs - L - 1)`, i.e. uniform over [L, jobs - L - 2];
- sequence k replays jobs start_k .. start_k + L - 1, alone, on an empty machine, and scores
  the mean bounded slowdown max((wait + run) / max(run, 10 s), 1) over its L jobs; the tables
  give the mean over the N sequences.

Here each sequence is replayed through the service like any other replay (a record selection
of the trace, `record_window`), and `aggregate` puts each run label's sequences (and repeats)
together. RLScheduler's heuristics order by the requested time; on lublin_256 it is missing
and falls back to the run time, so estimates are exact there. Width: RLScheduler takes the
larger of requested and allocated processors, this replay the requested ones when given
(the same on lublin_256, which has allocated processors only); records with a negative run
time are in RLScheduler's list but dropped (and counted) by this replay's cleaning.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .report_tables import fixed_width
from .swf import iter_records

# RLScheduler's evaluation defaults (its compare script and published tables).
DEFAULT_LENGTH = 1024
DEFAULT_SEED = 1
NEGATIVE_RUN_TIME = 10  # RLScheduler's loader sets a negative run time to 10 s


def gym_rng(seed: int) -> np.random.RandomState:
    """The generator of `gym.utils.seeding.np_random(seed)` (gym < 0.22)."""
    if seed < 0:
        raise ValueError(f"seed must be >= 0, not {seed}")
    digest = hashlib.sha512(str(seed % 2**64).encode("utf8")).digest()[:8]
    value = int.from_bytes(digest, "little")
    words = []
    while value:
        value, word = divmod(value, 2**32)
        words.append(word)
    return np.random.RandomState(words or [0])


def draw_starts(job_count: int, count: int, length: int, seed: int) -> list[int]:
    """Start indices of `count` sequences of `length` jobs, drawn as RLScheduler draws them."""
    low, high = length, job_count - length - 1
    if count < 1 or length < 1:
        raise ValueError("--sequences and --sequence-length must be >= 1")
    if high <= low:
        raise ValueError(
            f"a trace of {job_count} jobs is too short for sequences of {length} "
            f"(RLScheduler draws starts in [L, jobs - L - 1), which needs jobs > 2 L + 1)"
        )
    rng = gym_rng(seed)
    return [int(rng.randint(low, high)) for _ in range(count)]


def rlscheduler_jobs(path: str | Path) -> list[int]:
    """Record ordinals (0-based over the job lines) of RLScheduler's job list, in its order:
    records with run time != 0, sorted by job number."""
    kept = [
        (record.job_number, ordinal)
        for ordinal, (_, record) in enumerate(iter_records(path))
        if record.run_time != 0
    ]
    return [ordinal for _, ordinal in sorted(kept)]


@dataclass(frozen=True, slots=True)
class JobSequence:
    index: int  # k, in drawing order
    start: int  # index of its first job in RLScheduler's job list
    length: int
    seed: int
    records: frozenset[int]  # record ordinals of its jobs

    def describe(self) -> dict[str, int]:
        return {"index": self.index, "start": self.start, "length": self.length,
                "seed": self.seed}


def draw_sequences(path: str | Path, count: int, length: int, seed: int) -> list[JobSequence]:
    jobs = rlscheduler_jobs(path)
    return [
        JobSequence(k, start, length, seed, frozenset(jobs[start : start + length]))
        for k, start in enumerate(draw_starts(len(jobs), count, length, seed))
    ]


# Figures aggregated per run label: (header, path in a run summary, scale, digits).
AGGREGATED: tuple[tuple[str, tuple[str, ...], float, int], ...] = (
    ("mean bsld", ("bounded_slowdown", "mean"), 1, 2),
    ("p99 bsld", ("bounded_slowdown", "p99"), 1, 1),
    ("mean wait [h]", ("wait_seconds", "mean"), 1 / 3600, 2),
    ("p99 wait [h]", ("wait_seconds", "p99"), 1 / 3600, 2),
    ("util", ("utilisation",), 1, 3),
    ("dec p50 [ms]", ("decision_seconds", "p50"), 1000, 1),
)
# The longest wait of all the label's runs, in hours (not a mean of each run's longest).
LONGEST_WAIT = "max wait [h]"


def _value(summary: dict[str, Any], keys: tuple[str, ...], scale: float = 1) -> float | None:
    value: Any = summary
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value) * scale
    return None


def aggregate(summaries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per run label, in first-seen order: runs (sequences x repeats), for each figure of
    AGGREGATED the mean and the sample standard deviation over the runs (0 for one run), and
    the longest wait of them all in hours (LONGEST_WAIT)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for s in summaries:
        groups.setdefault(str(s.get("label", "?")), []).append(s)
    rows = []
    for label, runs in groups.items():
        row: dict[str, Any] = {"label": label, "runs": len(runs)}
        for header, keys, scale, _ in AGGREGATED:
            values = [v for v in (_value(r, keys, scale) for r in runs) if v is not None]
            row[header] = (
                (statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0)
                if values else None
            )
        longest = [v for v in (_value(r, ("wait_seconds", "max"), 1 / 3600) for r in runs)
                   if v is not None]
        row[LONGEST_WAIT] = max(longest) if longest else None
        rows.append(row)
    return rows


def aggregate_table(summaries: Sequence[dict[str, Any]]) -> str:
    """A fixed-width table of `aggregate`: one row per run label, `mean ± std` per figure of
    AGGREGATED, and the longest wait next to the waits."""
    names = [h for h, _, _, _ in AGGREGATED]
    digits = {h: d for h, _, _, d in AGGREGATED}
    names.insert(names.index("p99 wait [h]") + 1, LONGEST_WAIT)
    lines = [["run", "runs", *names]]
    for row in aggregate(summaries):
        cells = [row["label"], str(row["runs"])]
        for name in names:
            value = row[name]
            if name == LONGEST_WAIT:
                cells.append("-" if value is None else f"{value:,.2f}")
            else:
                cells.append("-" if value is None or any(map(math.isnan, value))
                             else f"{value[0]:,.{digits[name]}f} ± {value[1]:,.{digits[name]}f}")
        lines.append(cells)
    return fixed_width(lines)
