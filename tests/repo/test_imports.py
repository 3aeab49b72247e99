"""Every module of the service imports on its own, in a fresh interpreter (no import cycles),
and the simulator side's modules import no circle, lazily or not."""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import hpcdispatch.server
from tests.paths import ROOT

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


def _imported_siblings(path: Path, package: str) -> set[str]:
    """The modules of `path`'s own package it imports, function-level imports included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level == 1:
            found.update([node.module.split(".")[0]] if node.module
                         else [alias.name for alias in node.names])
        elif node.level == 0 and (node.module or "").startswith(package + "."):
            found.add((node.module or "")[len(package) + 1:].split(".")[0])
    return found


def test_the_simulator_side_has_no_import_circle_even_through_lazy_imports() -> None:
    """report_plots and report_promises imported each other (issue #52), hidden from the fresh
    interpreter above by a function-level import."""
    folder = ROOT / "sim_adapter"
    imports = {path.stem: _imported_siblings(path, "hpcdispatch.sim_adapter")
               for path in folder.glob("*.py")}
    circles: list[list[str]] = []

    def walk(module: str, chain: list[str]) -> None:
        for imported in sorted(imports.get(module, ())):
            if imported == chain[0]:
                circles.append([*chain, imported])
            elif imported not in chain and imported > chain[0]:  # each circle once
                walk(imported, [*chain, imported])

    for module in sorted(imports):
        walk(module, [module])
    assert circles == []
