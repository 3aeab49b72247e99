"""docs/slurm-bridge.md's local-cluster command runs as written from a copy of the repository
and holds jobs (issue #33, item 7): the command is taken from the page, run in a fresh copy
with `bash`, a job submitted without `-H` must be held by the shipped job_submit.lua, and
SIGTERM stops the cluster cleanly. Where Slurm cannot be installed the test is skipped with
the reason (`REQUIRE_SLURM_TESTS=1` turns that into a failure), like the other Slurm tests."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.repo.test_repo_docs import ROOT, fenced_blocks, listed_files
from tests.slurm_cluster import ensure_slurm
from tests.system_packages import required

PAGE = "docs/slurm-bridge.md"
MARKER = "tests.slurm_cluster"
READY = "export SLURM_CONF="
HELD = {"JobHeldUser", "JobHeldAdmin"}


def documented_command() -> str:
    """The one shell block of the page that starts the local cluster."""
    blocks = [b.text for b in fenced_blocks(PAGE) if b.language == "bash" and MARKER in b.text]
    assert len(blocks) == 1, f"{PAGE} should show the local-cluster command in one bash block"
    return blocks[0]


def test_the_page_shows_the_command_in_a_block() -> None:
    assert documented_command().startswith("python3 -m tests.slurm_cluster ")


@pytest.fixture
def fresh_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "clone"
    for path in listed_files():
        target = copy / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    return copy


@pytest.fixture
def local_cluster(fresh_copy: Path, tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """The documented command running in `fresh_copy`: (the line that says it is up, the
    Slurm client environment it announced)."""
    reason = ensure_slurm()
    if reason is not None:
        if required("slurm"):
            pytest.fail(f"Slurm required but unavailable: {reason}")
        pytest.skip(f"Slurm test skipped: {reason}")
    scratch = tmp_path / "scratch"  # mktemp -d makes the cluster's folder here
    scratch.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("SLURM_CONF", "PYTHONPATH")}
    started = subprocess.Popen(
        ["bash", "-e", "-c", documented_command()], cwd=fresh_copy, env={**env, "TMPDIR":
                                                                          str(scratch)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )
    try:
        assert started.stdout is not None
        lines: list[str] = []  # what it says before it is up (an apt-get install, ...)
        for line in started.stdout:
            lines.append(line)
            if READY in line:
                break
        first = lines[-1] if lines else ""
        assert READY in first, "the documented command did not start a cluster:\n" + "".join(
            lines)
        conf = first.split(READY, 1)[1].split()[0]
        assert Path(conf).is_relative_to(scratch), conf
        yield first, {**env, "SLURM_CONF": conf}
        os.killpg(started.pid, signal.SIGTERM)
        assert started.wait(timeout=120) == 0
    finally:
        if started.poll() is None:
            os.killpg(started.pid, signal.SIGKILL)
            started.wait(timeout=30)


def test_the_documented_local_cluster_runs_as_written_and_holds_jobs(
        local_cluster: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    first, env = local_cluster
    job = subprocess.run(["sbatch", "--parsable", "--wrap", "sleep 1"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=60, check=True)
    job_id = job.stdout.strip().split(";")[0]
    state = ""
    for _ in range(600):  # until slurmctld answers for the job (the job stays pending)
        shown = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%T %r"], env=env,
                               capture_output=True, text=True, timeout=60)
        state = shown.stdout.strip()
        if state:
            break
        time.sleep(0.1)
    status, _, reason = state.partition(" ")
    assert status == "PENDING" and reason in HELD, state
    assert "held at submission" in first  # and the command says so
