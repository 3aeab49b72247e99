"""A newcomer's first hour (issue #51, item 5), through the command line: each mistake of the
list is answered with one line that says what is wrong and what to do, not a traceback or a
wrong cause, and what the commands write says what it is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "hpcdispatch"]


def run(*args: str, cwd: Path | None = None, timeout: float = 600
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd)


def simulate(*args: str) -> subprocess.CompletedProcess[str]:
    return run("simulate", "--in-process", "--no-progress", *args)


def refused(done: subprocess.CompletedProcess[str], command: str = "simulate") -> str:
    """The one line a refused command printed (exit 2, no traceback)."""
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"hpcdispatch {command}: "), done.stderr
    return lines[0].removeprefix(f"hpcdispatch {command}: ")


# -- the system file: its errors name the file, the line and the key expected ---------------

SYSTEM_FILES = {
    "no-count.yaml": ("name: site\ngroups:\n  - prefix: gpu\n    capacity: {core: 16}\n",
                      "line 3: node group 1 has no 'count': the number of nodes"),
    "no-groups.yaml": ("name: site\ngroup:\n  - prefix: gpu\n",
                       "line 2: unknown key 'group' in the file; its keys are name"),
    "count-word.yaml": ("groups:\n  - {prefix: a, count: 2, capacity: {core: 16}}\n"
                        "  - {prefix: b, count: two, capacity: {core: 16}}\n",
                        "line 3: node group 2: 'count' must be a whole number > 0, not 'two'"),
    "indented.yaml": ("groups:\n  - prefix: gpu\n    count: 4\n      capacity: {core: 16}\n",
                      "line 4, column 15: not a YAML file: mapping values are not allowed"),
    "no-capacity.json": ('{"groups": [\n  {"prefix": "a", "count": 2}\n]}\n',
                         "line 2: node group 1 has no 'capacity'"),
}


@pytest.mark.parametrize("name", sorted(SYSTEM_FILES))
def test_a_wrong_system_file_is_refused_naming_the_file_the_line_and_the_key(
        tmp_path: Path, name: str) -> None:
    """They were bare KeyError('count') / KeyError('groups'), or a syntax error with no line."""
    text, expected = SYSTEM_FILES[name]
    (tmp_path / name).write_text(text, encoding="utf-8")
    error = refused(simulate("--system", str(tmp_path / name), "--limit-jobs", "5",
                             "--dispatcher", "fcfs", "--out", str(tmp_path / "runs")))
    assert error.startswith(f"system {tmp_path / name}, {expected}"), error
    assert not (tmp_path / "runs").exists()


def test_the_system_file_of_the_docs_replays(tmp_path: Path) -> None:
    """docs/replays.md, *System files*: the example as printed."""
    from tests.paths import ROOT

    page = (ROOT / "docs" / "replays.md").read_text(encoding="utf-8")
    section = page[page.index("## System files"):]
    start = section.index("```yaml\n") + len("```yaml\n")
    (tmp_path / "eurora.yaml").write_text(section[start:section.index("```", start)],
                                          encoding="utf-8")
    done = simulate("--system", str(tmp_path / "eurora.yaml"), "--limit-jobs", "20",
                    "--dispatcher", "fcfs", "--out", str(tmp_path / "runs"))
    assert done.returncode == 0, done.stderr
    assert "system eurora (64 nodes, 1024 cores)" in done.stdout


# -- a trace that is not SWF -------------------------------------------------------------------


def test_a_gzip_file_that_is_not_swf_is_said_not_to_be_a_trace(tmp_path: Path) -> None:
    """It was blamed on the header: "the trace header gives neither MaxNodes nor MaxProcs"."""
    import gzip

    trace = tmp_path / "jobs.swf.gz"
    with gzip.open(trace, "wt", encoding="utf-8") as out:
        out.write("job,user,submit\n1,alice,0\n")
    error = refused(simulate("--trace", str(trace), "--dispatcher", "fcfs",
                             "--out", str(tmp_path / "runs")))
    assert error == (f"{trace}:1: not an SWF trace: the first line is 'job,user,submit', "
                     "neither a ';' header comment nor a job record of 18 numbers (expected 18 "
                     "whitespace-separated fields, found 1)")
