"""The SWF reader: real traces, hand-made ones, compression, cleaning and malformed input."""

from __future__ import annotations

import gzip
import inspect
import lzma
from pathlib import Path

import pytest

from hpcdispatch.sim_adapter.replay import bundled_trace
from hpcdispatch.sim_adapter.swf import (
    UNKNOWN_USER,
    CleaningStats,
    SwfFormatError,
    iter_jobs,
    iter_records,
    read_header,
)

TRACES = bundled_trace().parent  # the traces shipped in the package (sim_adapter/data)
KTH = TRACES / "KTH-SP2-1996-2.1-cln.swf.xz"
ATLAS = TRACES / "LLNL-Atlas-2006-2.1-cln.swf.xz"
LUBLIN = TRACES / "lublin_256.swf.xz"

HEADER = """; Version: 2.2
; Computer: test box
; Information: http://example.org/
;              http://example.org/more
; MaxJobs: 6
; MaxRecords: 6
; UnixStartTime: 1000000
; MaxNodes: 4
; MaxProcs: 16
; Note: first note
; Note: second note
;       continued here
;
"""


def line(job: int, submit: int, run: int, alloc: int, req_procs: int, req_time: int,
         user: int = 1, status: int = 1, mem: int = -1) -> str:
    fields = [job, submit, -1, run, alloc, -1, -1, req_procs, req_time, mem, status, user,
              1, -1, 1, -1, -1, -1]
    return " ".join(str(f) for f in fields)


BODY = [
    line(1, 10, 100, 4, 4, 200),  # kept as is
    line(2, 20, 50, 8, -1, 100),  # width from allocated procs
    line(3, 30, 30, -1, 2, -1),  # estimate from the run time
    line(4, 40, -1, 4, 4, 100),  # dropped: run time unknown
    line(5, 50, 10, -1, -1, 100),  # dropped: no width
    line(6, 60, 500, 1, 1, 300),  # overruns its requested time
]


def write(path: Path, text: str) -> Path:
    if path.suffix == ".xz":
        with lzma.open(path, "wt") as f:
            f.write(text)
    elif path.suffix == ".gz":
        with gzip.open(path, "wt") as f:
            f.write(text)
    else:
        path.write_text(text)
    return path


@pytest.mark.parametrize("name", ["t.swf", "t.swf.gz", "t.swf.xz"])
def test_plain_gz_xz_read_the_same(tmp_path: Path, name: str) -> None:
    path = write(tmp_path / name, HEADER + "\n".join(BODY) + "\n")
    header = read_header(path)
    assert header.max_nodes == 4 and header.max_procs == 16
    assert header.unix_start_time == 1_000_000 and header.max_records == 6
    assert header.get("Information") == "http://example.org/ http://example.org/more"
    assert header.notes == ["first note", "second note continued here"]
    records = [r for _, r in iter_records(path)]
    assert [r.job_number for r in records] == [1, 2, 3, 4, 5, 6]
    assert records[1].allocated_procs == 8 and records[1].requested_procs == -1
    assert next(n for n, _ in iter_records(path)) == HEADER.count("\n") + 1


def test_cleaning_conventions_and_counted_drops(tmp_path: Path) -> None:
    path = write(tmp_path / "t.swf", HEADER + "\n".join(BODY) + "\n")
    stats = CleaningStats()
    jobs = {j.id: j for j in iter_jobs(path, stats)}
    assert sorted(jobs) == ["1", "2", "3", "6"]
    assert jobs["1"].width == 4 and jobs["1"].requested_time == 200
    assert jobs["2"].width == 8  # allocated, since requested is unknown
    assert jobs["3"].requested_time == 30  # estimate = run time
    assert jobs["6"].killed and jobs["6"].duration == 300
    assert not jobs["1"].killed and jobs["1"].duration == 100
    assert jobs["1"].user == "u1" and jobs["1"].queue == "q1"
    assert stats.records == 6 and stats.kept == 4
    assert stats.dropped == {"run_time < 0": 1, "width <= 0": 1}
    assert stats.estimate_from_run_time == 1
    assert stats.as_dict()["dropped_total"] == 2


def test_limit_and_streaming(tmp_path: Path) -> None:
    # A garbage line after the first jobs: a lazy reader yields the first jobs before it.
    path = write(tmp_path / "t.swf", HEADER + "\n".join(BODY[:2]) + "\nthis is garbage\n")
    assert inspect.isgenerator(iter_jobs(path, CleaningStats()))
    jobs = iter_jobs(path, CleaningStats())
    assert next(jobs).id == "1"
    assert next(jobs).id == "2"
    with pytest.raises(SwfFormatError):
        next(jobs)
    stats = CleaningStats()
    assert [j.id for j in iter_jobs(path, stats, limit=1)] == ["1"]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("7 70 10 1 1", "expected 18 whitespace-separated fields, found 5"),
        (line(7, 70, 10, 1, 1, 10).replace(" 10 ", " ten ", 1), "is not a number: 'ten'"),
        (line(7, 70, 10, -5, 1, 10), "field 5 (allocated_procs) is negative"),
        (line(7, 70, 10, 1, -3, 10), "field 8 (requested_procs) is negative"),
        (line(7, 70, 10, 1, 1, -9), "field 9 (requested_time) is negative"),
        (line(7, 70, 10, 1, 1, 10).replace(" 70 ", " 70.5 ", 1), "must be an integer"),
        (line(7, 5, 10, 1, 1, 10), "earlier than 60 on line"),
    ],
)
def test_malformed_lines_name_file_line_and_problem(
    tmp_path: Path, bad: str, message: str
) -> None:
    path = write(tmp_path / "bad.swf.xz", HEADER + "\n".join([*BODY, bad]) + "\n")
    with pytest.raises(SwfFormatError) as info:
        list(iter_jobs(path, CleaningStats()))
    expected_line = HEADER.count("\n") + len(BODY) + 1
    assert info.value.line == expected_line
    assert str(info.value).startswith(f"{path}:{expected_line}: ")
    assert message in str(info.value)


def test_kth_header_and_counts() -> None:
    header = read_header(KTH)
    assert (header.max_nodes, header.max_procs) == (100, 100)
    assert header.unix_start_time == 843480031
    assert "uses the EASY scheduler" in header.notes
    stats = CleaningStats()
    jobs = iter_jobs(KTH, stats)
    count = sum(1 for _ in jobs)
    # The shipped traces' README (sim_adapter/data/README.md): 28,476 records, 28,475 with
    # runtime >= 0 and procs > 0.
    assert stats.records == header.max_records == 28_476
    assert count == stats.kept == 28_475
    assert sum(stats.dropped.values()) == 1
    assert stats.estimate_from_run_time == 0  # requested time present for 100 % of jobs


def test_atlas_counts_match_the_readme() -> None:
    header = read_header(ATLAS)
    assert (header.max_nodes, header.max_procs) == (1152, 9216)
    assert header.values["Partition"][0].split()[1] == "pbatch"
    stats = CleaningStats()
    widths = 0
    for job in iter_jobs(ATLAS, stats):
        widths = max(widths, job.width)
    # The shipped traces' README (sim_adapter/data/README.md): 43,778 records; 39,207 with
    # runtime >= 0 and procs > 0.
    assert stats.records == 43_778
    assert stats.kept == 39_207
    assert stats.records - stats.kept == sum(stats.dropped.values())
    assert widths <= 9216


def test_lublin_uses_allocated_procs_and_runtime_estimates() -> None:
    header = read_header(LUBLIN)
    assert header.max_nodes == 256 and header.max_procs is None
    stats = CleaningStats()
    jobs = list(iter_jobs(LUBLIN, stats, limit=500))
    assert len(jobs) == 500
    assert all(j.requested_time == max(1, j.run_time) for j in jobs)
    assert stats.estimate_from_run_time == 500
    assert all(j.user == UNKNOWN_USER for j in jobs)  # field 12 is -1 in this synthetic trace
