"""The suite's temporary files, in one folder of its own, and the check that none is left.

At start (tests/conftest.py, pytest_configure) the suite makes `hpcdispatch-tests-XXXXXXXX`
in the system temp folder and points TMPDIR (and `tempfile`) at it, so that what the tests
and every program they start (the CLI, servers, daemons) put in "the temp folder" lands there,
pytest's own `tmp_path` folders included. At the end (pytest_sessionfinish) anything in it
but pytest's folder is a leftover: a test or a program that did not clean up after itself;
the run fails and names it. The folder is then removed, pytest's folder too unless a test
failed (it is kept for a look, and its path printed). Other processes' files in the system
temp folder are never looked at: only the suite's own folder is.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

PREFIX = "hpcdispatch-tests-"
PYTEST_FOLDER = "pytest-of-"  # pytest's basetemp root: pytest-of-<user>/pytest-N


def start() -> Path:
    """Make the suite's temp folder and make it the temp folder of this process and its
    children. Open to every user as the system's is (the PostgreSQL tests run its server as
    the postgres user)."""
    root = Path(tempfile.mkdtemp(prefix=PREFIX))
    root.chmod(0o1777)
    os.environ["TMPDIR"] = str(root)
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again
    return root


def leftovers(root: Path) -> list[Path]:
    """What the suite left in `root` besides pytest's own folder."""
    return sorted(p for p in root.iterdir() if not p.name.startswith(PYTEST_FOLDER))


def finish(root: Path, keep_pytest_folder: bool) -> list[str]:
    """Remove the suite's temp folder (pytest's folder kept when `keep_pytest_folder`);
    returns the lines to print: the leftovers found, or where the kept folder is."""
    left = leftovers(root)
    lines = [f"the suite left {len(left)} temporary file(s) or folder(s) behind (each test "
             "and program it starts must remove its own; use tmp_path):"] if left else []
    for path in left:
        lines.append(f"  {path.name} ({_size(path):,} bytes)")
        _remove(path)
    if keep_pytest_folder:
        lines.append(f"tests failed: their tmp_path folders are kept in {root}")
    else:
        _remove(root)
    return lines


def _size(path: Path) -> int:
    if path.is_symlink() or not path.is_dir():
        return path.lstat().st_size
    return sum(p.lstat().st_size for p in path.rglob("*"))


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
