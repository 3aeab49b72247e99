"""What the test suite installs outside .venv is said first, and a quick run installs nothing
(issue #23, item 3): run as root, the suite used to apt-get install Slurm, Prometheus and
PostgreSQL system-wide without a word."""

from __future__ import annotations

import os
import subprocess
from typing import Any

import pytest

from tests import observability, postgres_server, slurm_cluster, system_packages
from tests.paths import ROOT


@pytest.fixture
def nothing_installed(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Slurm, Prometheus and PostgreSQL missing, root with apt-get; commands run, recorded."""
    commands: list[list[str]] = []

    def run(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        commands.append(list(command))
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(slurm_cluster, "missing_binaries", lambda: ["slurmctld"])
    monkeypatch.setattr(postgres_server, "_missing", lambda: "pg_ctl is not installed")
    real_which = observability.shutil.which
    monkeypatch.setattr(system_packages.shutil, "which",
                        lambda name: "/usr/bin/apt-get" if name == "apt-get" else None)
    monkeypatch.setattr(observability.shutil, "which",
                        lambda name: None if name == "prometheus" else real_which(name))
    monkeypatch.setattr(system_packages.os, "geteuid", lambda: 0)
    monkeypatch.setattr(postgres_server.os, "geteuid", lambda: 0)
    monkeypatch.setattr(system_packages.subprocess, "run", run)
    for name in ("REQUIRE_SLURM_TESTS", "REQUIRE_PROMETHEUS_TESTS", "REQUIRE_POSTGRES_TESTS"):
        monkeypatch.delenv(name, raising=False)
    return commands


def test_a_quick_run_installs_nothing_and_says_why_it_skips(
    nothing_installed: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(system_packages.QUICK_ENV, "1")
    slurm = slurm_cluster.ensure_slurm()
    postgres = postgres_server.ensure_postgres()
    with pytest.raises(pytest.skip.Exception) as prometheus:
        observability.ensure_prometheus()
    assert nothing_installed == []
    assert slurm is not None and "quick run" in slurm and "slurmctld slurmd slurm-client" in slurm
    assert postgres is not None and "quick run" in postgres and "postgresql" in postgres
    assert "quick run" in str(prometheus.value) and "prometheus" in str(prometheus.value)


def test_ci_requirements_win_over_a_quick_run(
    nothing_installed: list[list[str]], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(system_packages, "announce", lambda text: None)
    monkeypatch.setenv(system_packages.QUICK_ENV, "1")
    monkeypatch.setenv("REQUIRE_SLURM_TESTS", "1")
    slurm_cluster.ensure_slurm()
    assert ["apt-get", "install", "-y", "-q", "--no-install-recommends", "slurmctld", "slurmd",
            "slurm-client"] in nothing_installed


def test_packages_are_named_before_apt_get_installs_them(
    nothing_installed: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(system_packages.QUICK_ENV, raising=False)
    said: list[tuple[str, int]] = []
    monkeypatch.setattr(system_packages, "announce",
                        lambda text: said.append((text, len(nothing_installed))))
    postgres_server.ensure_postgres()
    assert said, "apt-get ran without a word"
    text, commands_before = said[0]
    assert commands_before == 0  # said before the first apt-get
    assert "installing Debian packages system-wide with apt-get: postgresql" in text
    assert "scripts/test.sh --quick" in text
    assert ["apt-get", "update", "-q"] in nothing_installed


def test_test_sh_quick_says_so_and_skips_the_integration_tests() -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("REQUIRE_") and k != system_packages.QUICK_ENV}
    done = subprocess.run(
        ["scripts/test.sh", "--quick", "-q", "-rs", "-p", "no:cacheprovider",
         "tests/server/predictors/test_postgres_store.py", "-k", "apply_each_migration_once"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert "== quick run" in done.stderr, done.stderr
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 skipped" in done.stdout and "quick run (QUICK_TESTS=1" in done.stdout
    assert "installing Debian packages" not in done.stdout + done.stderr


def test_test_sh_help_names_the_quick_option() -> None:
    done = subprocess.run(["scripts/test.sh", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0
    assert "--quick" in done.stdout and "Slurm" in done.stdout
