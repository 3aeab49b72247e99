"""The suite leaves nothing in the system temp folder (issue #33, item 7: a run left 34 MB
there): its temporary files go to a folder of its own, and a run that leaves one behind fails
and names it (tests/suite_temp.py, tests/conftest.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests import suite_temp
from tests.paths import ROOT

CLEAN = """
def test_clean(tmp_path):
    (tmp_path / "kept-by-pytest").write_text("x")
"""
LEAKING = """
import tempfile

def test_leaking():
    folder = tempfile.mkdtemp(prefix="forgotten-")
    open(folder + "/data", "w").write("x" * 1000)
"""


def test_this_run_keeps_its_temporary_files_in_a_folder_of_its_own(tmp_path: Path) -> None:
    own = Path(os.environ["TMPDIR"])
    assert own.name.startswith(suite_temp.PREFIX)
    assert Path(tempfile.gettempdir()) == own
    assert tmp_path.is_relative_to(own)


def children() -> set[Path]:
    """What a run of its own (below) makes in the temp folder: its folder, the leaked one."""
    return {p for p in Path(tempfile.gettempdir()).iterdir()
            if p.name.startswith((suite_temp.PREFIX, "forgotten-"))}


def run_suite(folder: Path, test: str) -> subprocess.CompletedProcess[str]:
    """pytest over one test file with this suite's conftest, as a run of its own."""
    (folder / "test_one.py").write_text(test)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
         "-c", os.devnull, "--rootdir", str(folder), str(folder / "test_one.py")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )


def test_a_run_that_cleans_up_passes_and_leaves_nothing(tmp_path: Path) -> None:
    before = children()
    done = run_suite(tmp_path, CLEAN)
    assert done.returncode == 0, done.stdout + done.stderr
    assert children() == before


def test_a_run_that_leaves_a_temporary_folder_fails_and_names_it(tmp_path: Path) -> None:
    before = children()
    done = run_suite(tmp_path, LEAKING)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    assert "the suite left 1 temporary file(s) or folder(s) behind" in done.stdout
    assert "  forgotten-" in done.stdout and "(1,000 bytes)" in done.stdout
    assert children() == before  # and it was removed
