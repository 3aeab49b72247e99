"""The traces the README, the tests and the benchmarks use ship with the package, under short
names (issue #23, item 4); nothing reads a trace from outside the repository."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from hpcdispatch.sim_adapter.replay import SHIPPED_TRACES, resolve_trace
from hpcdispatch.sim_adapter.swf import read_header
from tests.paths import ROOT

CLI = [sys.executable, "-m", "hpcdispatch"]


@pytest.mark.parametrize(("name", "records"), [
    ("kth-sp2-slice", 3_000), ("kth-sp2", 28_476), ("llnl-atlas", 60_332),
    ("lublin-256", 10_000), ("lublin-256-est", 10_000),
])
def test_every_short_name_is_a_shipped_trace(name: str, records: int) -> None:
    path = resolve_trace(name)
    assert path.is_file() and path.parent.name == "data"
    assert read_header(path).max_records == records


def test_the_shipped_traces_are_small_and_attributed() -> None:
    data = resolve_trace("kth-sp2").parent
    # (800 kB since lublin_256_est, the stalls of issue #49)
    assert sum(p.stat().st_size for p in data.glob("*.swf.xz")) < 800_000
    readme = (data / "README.md").read_text(encoding="utf-8")
    assert "Parallel Workloads Archive" in readme
    for file in SHIPPED_TRACES.values():
        assert f"`{file}`" in readme


def test_nothing_reads_a_trace_outside_the_repository() -> None:
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "tests").rglob("*.py"),
             *(ROOT / "benchmarks").glob("*.py")]
    outside = re.compile(r"shared/traces|/work/")
    offenders = [f"{f.relative_to(ROOT)}:{n}" for f in files if f.name != Path(__file__).name
                 for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1)
                 if outside.search(line)]
    assert offenders == []


@pytest.mark.parametrize(("given", "message"), [
    ("{tmp}", "is a directory; give an SWF file"),
    ("{tmp}/none.swf", "no such file, and not a shipped trace's name (kth-sp2-slice, kth-sp2"),
])
def test_a_wrong_trace_is_one_line_not_a_traceback(tmp_path: Path, given: str,
                                                   message: str) -> None:
    done = subprocess.run([*CLI, "simulate", "--trace", given.format(tmp=tmp_path),
                           "--no-progress", "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()
