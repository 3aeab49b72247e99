"""Replaying a selection of a trace's job records: a window `FIRST:LAST`, or any set of them.

Records are counted from 0 over the job lines of the file in order (comments and blank lines
do not count), and a window is half-open, as a Python slice: `--records 1000:2024` replays
the 1,024 records 1000 .. 2023. A window that ends past the trace's last record is refused
(`check_window`), not cut short. Selected records are cleaned as every replay cleans them
(`swf.clean_record`), and their drops are counted in the same CleaningStats.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from pathlib import Path

from .swf import (
    CleaningStats,
    SwfFormatError,
    TraceJob,
    clean_record,
    iter_records,
)


def parse_window(text: str) -> range:
    """`FIRST:LAST` -> range(FIRST, LAST); 0 <= FIRST < LAST."""
    first, sep, last = text.partition(":")
    try:
        if not sep:
            raise ValueError
        window = range(int(first), int(last))
    except ValueError:
        raise ValueError(f"record window {text!r}: expected FIRST:LAST, e.g. 0:1024") from None
    if window.start < 0 or not window:
        raise ValueError(f"record window {text!r}: need 0 <= FIRST < LAST")
    return window


def check_window(path: str | Path, window: range) -> range:
    """`window` if the trace at `path` has its records (read up to the window's end), else
    ValueError naming how many it has: a window past the last record is refused, not cut."""
    count = 0
    for count, _ in enumerate(iter_records(path), start=1):
        if count >= window.stop:
            return window
    where = "none of them in the window" if window.start >= count else \
        "the window ends past them"
    raise ValueError(f"record window {window.start}:{window.stop}: {path} has {count:,} job "
                     f"records (0:{count}), {where}")


def describe(records: Collection[int]) -> dict[str, int]:
    """What a summary says about the selection: first, last (exclusive) and how many."""
    if not records:
        return {"first": 0, "last": 0, "count": 0}
    if isinstance(records, range):
        return {"first": records.start, "last": records.stop, "count": len(records)}
    return {"first": min(records), "last": max(records) + 1, "count": len(records)}


def iter_selected_jobs(
    path: str | Path,
    records: Collection[int],
    stats: CleaningStats,
    limit: int | None = None,
) -> Iterator[TraceJob]:
    """Cleaned jobs of the selected records, in file order, at most `limit` of them.

    As `swf.iter_jobs`, the selected records must be sorted by submit time.
    """
    if not records:
        return
    last = records[-1] if isinstance(records, range) else max(records)
    previous, previous_line = -1, 0
    count = selected = 0  # job records read, of them selected
    for ordinal, (lineno, record) in enumerate(iter_records(path)):
        count = ordinal + 1
        if ordinal > last or (limit is not None and stats.kept >= limit):
            return
        if ordinal not in records:
            continue
        selected += 1
        if 0 <= record.submit_time < previous:
            raise SwfFormatError(
                path, lineno,
                f"submit time {record.submit_time} is earlier than {previous} on line "
                f"{previous_line}; the selected records must be sorted by submit time",
            )
        if record.submit_time >= 0:
            previous, previous_line = record.submit_time, lineno
        job = clean_record(lineno, record, stats)
        if job is not None:
            yield job
    if not selected:
        raise ValueError(f"record window {_shown(records)}: {path} has {count:,} job records "
                         f"(0:{count}), none of them in the window")


def _shown(records: Collection[int]) -> str:
    """FIRST:LAST of a window, or the first and last of a set of records."""
    if isinstance(records, range):
        return f"{records.start}:{records.stop}"
    return f"of {len(records):,} records from {min(records)} to {max(records)}"
