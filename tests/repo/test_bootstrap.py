"""scripts/bootstrap.sh says what it installs and shows pip's output only when the install
fails (issue #51: some 35 lines of pip and setuptools came before main.sh's table). A fake
virtual environment's python stands for pip: nothing is installed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.paths import ROOT

NOISE = [f"Collecting package-{i} (noise line {i})" for i in range(35)]


def fake_venv(folder: Path, pip_exit: int) -> Path:
    """A virtual environment whose python answers `-m pip ...` with NOISE and `pip_exit`."""
    python = folder / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    lines = "\n".join(f"echo '{line}'" for line in NOISE)
    python.write_text(f"#!/bin/sh\n{lines}\necho 'ERROR: no matching distribution' >&2\n"
                      f"exit {pip_exit}\n" if pip_exit else f"#!/bin/sh\n{lines}\nexit 0\n",
                      encoding="utf-8")
    python.chmod(0o755)
    return python.parents[1]


def bootstrap(venv: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HPCDISPATCH_VENV": str(venv)}
    return subprocess.run(["bash", str(ROOT / "scripts" / "bootstrap.sh"), "dev"], env=env,
                          capture_output=True, text=True, timeout=60)


def test_a_successful_install_prints_only_what_it_installs(tmp_path: Path) -> None:
    venv = fake_venv(tmp_path, pip_exit=0)
    done = bootstrap(venv)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{venv}\n"  # main.sh and test.sh read the path from it
    (announce,) = done.stderr.splitlines()
    assert announce.startswith("== installing hpcdispatch with its 'dev' extras")
    assert (venv / ".hpcdispatch-installed-dev").is_file()
    again = bootstrap(venv)  # done: nothing to install, nothing said
    assert (again.returncode, again.stdout, again.stderr) == (0, f"{venv}\n", "")


@pytest.mark.parametrize("pip_exit", [1, 2])
def test_a_failed_install_shows_pip_s_output_and_fails(tmp_path: Path, pip_exit: int) -> None:
    venv = fake_venv(tmp_path, pip_exit)
    done = bootstrap(venv)
    assert done.returncode != 0
    lines = done.stderr.splitlines()
    assert lines[0].startswith("== installing hpcdispatch")
    assert lines[1:36] == NOISE and "ERROR: no matching distribution" in lines
    assert lines[-1] == f"== the install into {venv} failed: pip's output is above"
    assert not (venv / ".hpcdispatch-installed-dev").exists()
