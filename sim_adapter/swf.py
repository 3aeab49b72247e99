"""Standard Workload Format (SWF) reader: header metadata, raw records and cleaned jobs.

Plain, `.gz` and `.xz` files are read line by line (generators), so a trace of any length needs
memory for one record at a time. Cleaning follows the usual replay conventions
(those of AccaSim and the Parallel Workloads Archive's SWF definition):

- width = requested processors (field 8) when > 0, else allocated processors (field 5);
- estimate = requested time (field 9) when > 0, else the run time (field 4), at least 1 s;
- a record with run time < 0, width <= 0 or submit time < 0 is dropped, and every drop is
  counted by reason in `CleaningStats` (never silent).

A malformed line (wrong field count, a value that is not a number, a negative size other than
the SWF "unknown" value -1, a value beyond `MAX_FIELD_VALUE`, submit times going backwards) and
a compressed file that cannot be read to its end (truncated, corrupt) raise `SwfFormatError`
naming the file, the line number and the problem.
"""

from __future__ import annotations

import gzip
import lzma
import re
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import IO

FIELD_COUNT = 18
_HEADER_KEY = re.compile(r"^;\s?([A-Za-z][A-Za-z0-9_]*):\s*(.*)$")
# Fields (0-based) that hold sizes: -1 means unknown, anything below is impossible.
_SIZE_FIELDS = (4, 6, 7, 8, 9)  # allocated procs, used memory, req. procs, req. time, req. memory
_FLOAT_FIELDS = (5, 6, 9)  # average CPU time and the memory fields may be fractional
# The largest magnitude of any job field: 2^31 - 1 s is 68 years (the service refuses a
# requested time beyond 2^31 s), 2^31 - 1 processors or KB per processor more than any system
# has. A larger value is a broken trace, and it would overflow the service's 64-bit fields.
MAX_FIELD_VALUE = 2**31 - 1
# What a compressed file that cannot be read to its end raises while it is read.
_UNREADABLE = (EOFError, OSError, lzma.LZMAError, zlib.error)


class SwfFormatError(ValueError):
    """A malformed SWF line: the file, the 1-based line number and what is wrong."""

    def __init__(self, path: str | Path, line: int, problem: str) -> None:
        super().__init__(f"{path}:{line}: {problem}")
        self.path = str(path)
        self.line = line
        self.problem = problem


@dataclass(frozen=True, slots=True)
class SwfRecord:
    """One job line: the 18 SWF fields in order (-1 = unknown)."""

    job_number: int
    submit_time: int  # seconds from the log start
    wait_time: int  # as scheduled by the production scheduler
    run_time: int
    allocated_procs: int
    avg_cpu_time: float
    used_memory: float  # KB per processor
    requested_procs: int
    requested_time: int  # the user's wall-time limit
    requested_memory: float  # KB per processor
    status: int  # 1 completed, 0 failed, 5 cancelled, 2/3/4 partial executions
    user_id: int
    group_id: int
    executable: int
    queue: int
    partition: int
    preceding_job: int
    think_time: int


_RECORD_FIELDS = tuple(f.name for f in fields(SwfRecord))
assert len(_RECORD_FIELDS) == FIELD_COUNT


@dataclass(slots=True)
class SwfHeader:
    """Header comments (`; Key: value`); a key may repeat (Note, Partition, ...)."""

    values: dict[str, list[str]] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)  # the raw comment lines, in order
    key_lines: dict[str, int] = field(default_factory=dict)  # key -> its first line number
    path: str = ""  # the file read (for errors that name a header line)

    def get(self, key: str) -> str | None:
        found = self.values.get(key)
        return found[0] if found else None

    def get_int(self, key: str) -> int | None:
        raw = self.get(key)
        if raw is None:
            return None
        try:
            return int(raw.split()[0])
        except (ValueError, IndexError):
            return None

    @property
    def max_nodes(self) -> int | None:
        return self.get_int("MaxNodes")

    @property
    def max_procs(self) -> int | None:
        return self.get_int("MaxProcs")

    @property
    def unix_start_time(self) -> int | None:
        return self.get_int("UnixStartTime")

    @property
    def max_records(self) -> int | None:
        return self.get_int("MaxRecords")

    @property
    def max_jobs(self) -> int | None:
        return self.get_int("MaxJobs")

    @property
    def notes(self) -> list[str]:
        return list(self.values.get("Note", []))


@dataclass(frozen=True, slots=True)
class TraceJob:
    """A cleaned SWF job, ready to replay."""

    id: str  # the SWF job number
    submit: int  # q_i, seconds
    run_time: int  # actual run time, seconds, >= 0
    width: int  # processors, > 0
    requested_time: int  # estimate used as the wall-time limit, seconds, >= 1
    user: str  # UNKNOWN_USER when the record has none
    group: str
    executable: str
    queue: str
    partition: str
    requested_memory_kb: float  # per processor; <= 0 when unknown
    line: int  # line number in the trace file

    @property
    def duration(self) -> int:
        """Time the job holds its resources: killed at its requested time."""
        return min(self.run_time, self.requested_time)

    @property
    def killed(self) -> bool:
        return self.run_time > self.requested_time

    @property
    def swf_partition(self) -> int:
        """Its SWF partition number (field 16); -1: unknown."""
        return int(self.partition[1:]) if self.partition else -1

    @property
    def swf_queue(self) -> int:
        """Its SWF queue number (field 15); -1: unknown."""
        return int(self.queue[1:]) if self.queue else -1


@dataclass(slots=True)
class CleaningStats:
    """What cleaning did: records read, jobs kept, drops by reason, estimates filled in."""

    records: int = 0
    kept: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    estimate_from_run_time: int = 0

    def drop(self, reason: str) -> None:
        self.dropped[reason] += 1

    def as_dict(self) -> dict[str, object]:
        return {
            "records": self.records,
            "kept": self.kept,
            "dropped": dict(sorted(self.dropped.items())),
            "dropped_total": sum(self.dropped.values()),
            "estimate_from_run_time": self.estimate_from_run_time,
        }


def open_text(path: str | Path) -> IO[str]:
    """Open a plain, .gz or .xz file for reading text."""
    name = str(path)
    if name.endswith(".xz"):
        return lzma.open(name, "rt", encoding="utf-8", errors="replace")
    if name.endswith(".gz"):
        return gzip.open(name, "rt", encoding="utf-8", errors="replace")
    return open(name, encoding="utf-8", errors="replace")


def _unreadable(path: str | Path, lineno: int, error: BaseException) -> SwfFormatError:
    """The error of a file that cannot be read on from line `lineno`."""
    reason = ("the compressed file ends before its end-of-stream marker (truncated?)"
              if isinstance(error, EOFError)
              else f"the file cannot be decompressed from here on ({error})")
    return SwfFormatError(path, lineno, reason)


def numbered_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, the line without surrounding blanks) of every line of `path`;
    a compressed file that cannot be read to its end raises SwfFormatError at the line where
    reading stopped."""
    with open_text(path) as handle:
        lineno = 0
        try:
            for lineno, raw in enumerate(handle, start=1):
                yield lineno, raw.strip()
        except _UNREADABLE as error:
            raise _unreadable(path, lineno + 1, error) from None


def _number(path: str | Path, lineno: int, index: int, text: str) -> float | int:
    """Field `index` of a job line as a number, within MAX_FIELD_VALUE."""
    name = f"field {index + 1} ({_RECORD_FIELDS[index]})"
    try:
        value: float | int = int(text)
    except ValueError:
        value = _fraction(path, lineno, name, text, fractional=index in _FLOAT_FIELDS)
    if abs(value) > MAX_FIELD_VALUE:
        raise SwfFormatError(path, lineno, f"{name} is {_shown(text)}, beyond the largest "
                             f"value a trace may hold ({MAX_FIELD_VALUE:,})")
    return value


def _fraction(path: str | Path, lineno: int, name: str, text: str,
              fractional: bool) -> float | int:
    """A field written with a decimal point or an exponent: a float where the field may be
    fractional, else an int when it is a whole number."""
    try:
        value = float(text)
    except ValueError:
        raise SwfFormatError(path, lineno, f"{name} is not a number: {_shown(text)}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise SwfFormatError(path, lineno, f"{name} is not finite: {_shown(text)}")
    if fractional:
        return value
    if value.is_integer():
        return int(value)
    raise SwfFormatError(path, lineno, f"{name} must be an integer: {_shown(text)}")


def _shown(text: str, most: int = 40) -> str:
    """`text` quoted, cut to `most` characters (a field can be a whole broken line long)."""
    return repr(text) if len(text) <= most else f"{text[:most]!r}... ({len(text):,} characters)"


def parse_record(path: str | Path, lineno: int, line: str) -> SwfRecord:
    """Parse one job line; raises SwfFormatError naming the problem."""
    parts = line.split()
    if len(parts) != FIELD_COUNT:
        raise SwfFormatError(
            path, lineno, f"expected {FIELD_COUNT} whitespace-separated fields, found {len(parts)}"
        )
    values = [_number(path, lineno, i, p) for i, p in enumerate(parts)]
    for i in _SIZE_FIELDS:
        if values[i] < -1:
            raise SwfFormatError(
                path, lineno,
                f"field {i + 1} ({_RECORD_FIELDS[i]}) is negative ({parts[i]}); "
                "only -1 (unknown) is allowed",
            )
    record = SwfRecord(*values)  # type: ignore[arg-type]
    return record


def _header_line(header: SwfHeader, lineno: int, line: str, last_key: str | None) -> str | None:
    header.lines.append(line)
    match = _HEADER_KEY.match(line)
    if match:
        key, value = match.group(1), match.group(2).strip()
        header.values.setdefault(key, []).append(value)
        header.key_lines.setdefault(key, lineno)
        return key
    text = line[1:].strip()
    if text and last_key is not None:  # continuation of the previous key's value
        values = header.values[last_key]
        values[-1] = f"{values[-1]} {text}".strip()
        return last_key
    return None if not text else last_key


def read_header(path: str | Path) -> SwfHeader:
    """The comment lines before the first job line."""
    header = SwfHeader(path=str(path))
    last_key: str | None = None
    for lineno, line in numbered_lines(path):
        if not line:
            continue
        if not line.startswith(";"):
            _check_first_record(path, lineno, line, header)
            break
        last_key = _header_line(header, lineno, line, last_key)
    return header


def _check_first_record(path: str | Path, lineno: int, line: str, header: SwfHeader) -> None:
    """A file whose first line is neither a header comment nor a job record is not an SWF
    trace (a CSV, a log, another archive's contents): said so, with what was found, rather
    than blamed on a header it does not have."""
    if header.values:
        return  # an SWF header: a broken job line is reported as such where it is read
    try:
        parse_record(path, lineno, line)
    except SwfFormatError as error:
        raise SwfFormatError(
            path, lineno, f"not an SWF trace: the first line is {_shown(line)}, neither a "
            f"';' header comment nor a job record of {FIELD_COUNT} numbers ({error.problem})"
        ) from None


def iter_records(path: str | Path) -> Iterator[tuple[int, SwfRecord]]:
    """(line number, record) for every job line; comments and blank lines are skipped."""
    for lineno, line in numbered_lines(path):
        if not line or line.startswith(";"):
            continue
        yield lineno, parse_record(path, lineno, line)


# The user of a record whose user id is -1: the service needs a user for every completion.
UNKNOWN_USER = "unknown"


def _label(value: int, prefix: str = "") -> str:
    return f"{prefix}{value}" if value >= 0 else ""


def clean_record(lineno: int, record: SwfRecord, stats: CleaningStats) -> TraceJob | None:
    """Apply the conventions to one record; None (and a counted reason) when it is dropped."""
    stats.records += 1
    if record.submit_time < 0:
        stats.drop("submit_time < 0")
        return None
    if record.run_time < 0:
        stats.drop("run_time < 0")
        return None
    width = record.requested_procs if record.requested_procs > 0 else record.allocated_procs
    if width <= 0:
        stats.drop("width <= 0")
        return None
    if record.requested_time > 0:
        estimate = record.requested_time
    else:
        estimate = record.run_time
        stats.estimate_from_run_time += 1
    stats.kept += 1
    return TraceJob(
        id=str(record.job_number),
        submit=record.submit_time,
        run_time=record.run_time,
        width=width,
        requested_time=max(1, estimate),
        user=_label(record.user_id, "u") or UNKNOWN_USER,
        group=_label(record.group_id, "g"),
        executable=_label(record.executable, "app"),
        queue=_label(record.queue, "q"),
        partition=_label(record.partition, "p"),
        requested_memory_kb=record.requested_memory,
        line=lineno,
    )


def iter_jobs(
    path: str | Path, stats: CleaningStats, limit: int | None = None
) -> Iterator[TraceJob]:
    """Cleaned jobs in submit order, at most `limit` of them; drops are counted in `stats`.

    Records must be sorted by submit time (as the SWF requires): a record submitted before
    the previous one raises SwfFormatError, since a streaming replay cannot go back in time.
    """
    previous = -1
    previous_line = 0
    for lineno, record in iter_records(path):
        if limit is not None and stats.kept >= limit:
            return
        if record.submit_time >= 0:
            if record.submit_time < previous:
                raise SwfFormatError(
                    path, lineno,
                    f"submit time {record.submit_time} is earlier than {previous} on line "
                    f"{previous_line}; SWF records must be sorted by submit time",
                )
            previous, previous_line = record.submit_time, lineno
        job = clean_record(lineno, record, stats)
        if job is not None:
            yield job
