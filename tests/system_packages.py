"""The Debian packages the integration tests run for real, and how they get installed.

Three groups of tests need programs from outside the virtual environment:

- the Slurm bridge against a real one-host cluster: `slurmctld slurmd slurm-client`;
- the dashboards' queries against a real Prometheus: `prometheus`;
- the predictors' knowledge base on a real PostgreSQL: `postgresql`.

When one is missing and the tests run as root where apt-get exists, it is installed
system-wide with apt-get, and a line on the terminal says so first (what, why, and how to
avoid it). A quick run (`scripts/test.sh --quick`, i.e. QUICK_TESTS=1) installs
nothing: those tests are skipped, with the reason. Where CI requires a group
(REQUIRE_SLURM_TESTS / REQUIRE_PROMETHEUS_TESTS / REQUIRE_POSTGRES_TESTS=1), it runs even in
a quick run and an unavailable group fails instead of skipping.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from typing import Any

QUICK_ENV = "QUICK_TESTS"  # not HPCDISPATCH_*: the server refuses unknown HPCDISPATCH_ variables

# group -> (Debian packages, what the tests use them for, the REQUIRE_* variable of CI)
GROUPS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "slurm": (("slurmctld", "slurmd", "slurm-client"),
              "the Slurm bridge's tests against a real one-host Slurm cluster",
              "REQUIRE_SLURM_TESTS"),
    "prometheus": (("prometheus",),
                   "the dashboards' and alerts' queries evaluated by a real Prometheus",
                   "REQUIRE_PROMETHEUS_TESTS"),
    "postgres": (("postgresql",),
                 "the predictors' knowledge base on a real PostgreSQL server",
                 "REQUIRE_POSTGRES_TESTS"),
}

_pytest_config: Any = None  # set by conftest.pytest_configure: to write past output capture


def required(group: str) -> bool:
    return os.environ.get(GROUPS[group][2], "") not in ("", "0")


def quick_run(group: str) -> bool:
    """A quick run that does not require `group`: its tests skip, nothing is installed."""
    return os.environ.get(QUICK_ENV, "") not in ("", "0") and not required(group)


def quick_skip_reason(group: str) -> str:
    packages, purpose, _ = GROUPS[group]
    return (f"quick run ({QUICK_ENV}=1, scripts/test.sh --quick): skips {purpose}, which "
            f"needs the Debian packages {' '.join(packages)}")


def announce(text: str) -> None:
    """Write `text` on the terminal now, even while pytest captures the tests' output."""
    capture = (_pytest_config.pluginmanager.getplugin("capturemanager")
               if _pytest_config is not None else None)
    if capture is None:
        print(text, file=sys.stderr, flush=True)
        return
    with capture.global_and_fixture_disabled():
        print(f"\n{text}", file=sys.stderr, flush=True)


def apt_install(group: str, timeout: float = 600.0) -> str | None:
    """Install `group`'s Debian packages with apt-get (root only); None when it worked, else
    why not. Says what it installs, and why, before it does."""
    packages, purpose, _ = GROUPS[group]
    if quick_run(group):
        return quick_skip_reason(group)
    if os.geteuid() != 0:
        return (f"not installed, and the tests do not run as root (apt-get needs root): "
                f"apt-get install {' '.join(packages)}, or scripts/test.sh --quick to skip "
                "these tests")
    if shutil.which("apt-get") is None:
        return f"not installed, and apt-get is not available: install {' '.join(packages)}"
    announce(f"== installing Debian packages system-wide with apt-get: {' '.join(packages)} "
             f"(for {purpose}; a few minutes the first time). To skip these tests and install "
             f"nothing: scripts/test.sh --quick ({QUICK_ENV}=1).")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        subprocess.run(["apt-get", "update", "-q"], env=env, check=True, capture_output=True,
                       timeout=timeout)
        subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages],
                       env=env, check=True, capture_output=True, timeout=timeout)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        tail = (getattr(exc, "stderr", b"") or b"").decode(errors="replace")[-400:]
        return f"apt-get could not install {' '.join(packages)}: {exc}: {tail}"
    announce(f"== installed {' '.join(packages)}")
    return None
