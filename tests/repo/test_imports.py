"""Every module of the service imports on its own, in a fresh interpreter (no import cycles)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import pytest

import hpcdispatch.server

MODULES = sorted(
    m.name for m in pkgutil.walk_packages(hpcdispatch.server.__path__, "hpcdispatch.server.")
)


def test_the_walk_finds_the_cp_core() -> None:
    assert {"hpcdispatch.server.dispatchers.cp.restart_policy",
            "hpcdispatch.server.dispatchers.cp.cpsat_attempt"} <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_module_imports_in_a_fresh_interpreter(module: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
