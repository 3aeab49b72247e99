"""Malformed SWF traces end a replay with one line naming the file, the line and the field, on
both replay paths (issue #33, item 6): `simulate --in-process` and `simulate` through the
embedded gRPC service. Never a traceback, never a half-written run folder, and a header that
describes an impossible system is refused before a node is made (the child runs under an
address-space limit, so a replay that would build 10^12 nodes fails instead of eating the
machine's memory)."""

from __future__ import annotations

import gzip
import lzma
import re
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "hpcdispatch", "simulate"]
PATHS = {"in-process": ["--in-process"], "grpc": []}
HEADER = "; MaxNodes: 8\n; MaxProcs: 8\n"  # lines 1 and 2
# A replay of a few jobs needs well under 1 GiB of memory, but the embedded gRPC service's
# threads reserve address space (a stack each) well beyond it: 4 GiB leaves them room, and a
# header of 10^12 nodes built node by node would still pass it within a minute.
ADDRESS_SPACE = 4 * 1024**3


def record(job: int, submit: int, requested_time: int | str = 200, procs: int = 4) -> str:
    return (f"{job} {submit} -1 100 {procs} -1 -1 {procs} {requested_time} -1 1 1 1 -1 -1 -1 "
            "-1 -1\n")


BODY = "".join(record(job, 10 * job) for job in range(1, 400))  # lines 3 .. 401


def plain(text: str) -> Callable[[Path], Path]:
    def write(folder: Path) -> Path:
        path = folder / "trace.swf"
        path.write_text(text)
        return path
    return write


def truncated(suffix: str, compress: Callable[[bytes], bytes]) -> Callable[[Path], Path]:
    def write(folder: Path) -> Path:
        path = folder / f"trace.swf{suffix}"
        path.write_bytes(compress((HEADER + BODY).encode())[:-40])
        return path
    return write


# name -> (how to write the trace, the error after "PATH:", as a regular expression)
MALFORMED: dict[str, tuple[Callable[[Path], Path], str]] = {
    "requested time 2^63": (
        plain(HEADER + record(1, 0) + record(2, 5, requested_time=2**63)),
        r"4: field 9 \(requested_time\) is '9223372036854775808', beyond the largest value "
        r"a trace may hold \(2,147,483,647\)"),
    "submit time 2^63": (
        plain(HEADER + record(1, 0) + record(2, 2**63)),
        r"4: field 2 \(submit_time\) is '9223372036854775808', beyond"),
    "truncated .gz": (truncated(".gz", gzip.compress),
                      r"\d+: the compressed file ends before its end-of-stream marker"),
    "truncated .xz": (truncated(".xz", lzma.compress),
                      r"\d+: the compressed file ends before its end-of-stream marker"),
    "MaxProcs 10^12": (
        plain("; Version: 2.2\n; MaxProcs: 1000000000000\n" + BODY),
        r"2: header MaxProcs: 1000000000000 makes 1,000,000,000,000 nodes, more than a "
        r"replay builds \(200,000; --max-nodes N raises the limit, or give --system\)"),
    "MaxNodes 10^12": (
        plain("; MaxNodes: 1000000000000\n; MaxProcs: 1000000000000\n" + BODY),
        r"1: header MaxNodes: 1000000000000 makes 1,000,000,000,000 nodes"),
    "a word for a number": (
        plain(HEADER + record(1, 0) + record(2, 5, requested_time="soon")),
        r"4: field 9 \(requested_time\) is not a number: 'soon'"),
}


def limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def simulate(path: str, trace: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *PATHS[path], "--trace", str(trace), "--dispatcher", "easy", "--out", str(out),
         "--no-progress", *extra],
        capture_output=True, text=True, timeout=600, preexec_fn=limit_memory,
    )


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_trace_ends_with_one_line_naming_line_and_field(
        tmp_path: Path, case: str, path: str) -> None:
    write, expected = MALFORMED[case]
    trace = write(tmp_path)
    done = simulate(path, trace, tmp_path / "runs")
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert all(line.startswith("hpcdispatch simulate: ") for line in lines), done.stderr
    assert re.fullmatch(f"hpcdispatch simulate: {re.escape(str(trace))}:{expected}.*",
                        lines[-1]), lines[-1]
    assert not any((tmp_path / "runs").glob("*")), "a half-written run folder is left"


def test_the_advice_of_the_header_error_works(tmp_path: Path) -> None:
    write, _ = MALFORMED["MaxProcs 10^12"]
    trace = write(tmp_path)
    done = simulate("in-process", trace, tmp_path / "runs", "--system", "8x1",
                    "--limit-jobs", "20")
    assert done.returncode == 0, done.stderr
    assert "20 jobs kept" in done.stdout


def test_a_system_beyond_max_nodes_is_refused_and_the_limit_can_be_raised(
        tmp_path: Path) -> None:
    trace = plain(HEADER + BODY)(tmp_path)
    refused = simulate("in-process", trace, tmp_path / "runs", "--system", "300000x1")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        "hpcdispatch simulate: system '300000x1': 300,000 nodes, more than a replay builds "
        "(200,000; --max-nodes N raises the limit)")
    done = simulate("in-process", trace, tmp_path / "runs", "--system", "16x1",
                    "--max-nodes", "16", "--limit-jobs", "20")
    assert done.returncode == 0, done.stderr
