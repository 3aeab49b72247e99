"""Packaging: the wheel builds without setuptools' "Package would be ignored" warnings and
carries the data files the code reads (the bundled snapshot and trace)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from tests.paths import ROOT

SOURCES = ("pyproject.toml", "README.md", "LICENSE")


def _source_tree(into: Path) -> Path:
    """A copy of what the build reads (package folders of pyproject.toml, the readme), so that
    the build's own build/ and egg-info folders stay out of the working tree."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    folders = {d.split("/")[0] for d in config["tool"]["setuptools"]["package-dir"].values()}
    source = into / "src"
    source.mkdir()
    for name in SOURCES:
        shutil.copy2(ROOT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "build", "*.egg-info")
    for folder in sorted(folders):
        shutil.copytree(ROOT / folder, source / folder, ignore=ignore)
    return source


def test_the_wheel_builds_cleanly_with_its_data_files(tmp_path: Path) -> None:
    source = _source_tree(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-v",
         "-w", str(tmp_path / "dist"), str(source)],
        capture_output=True, text=True, timeout=120,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "would be ignored" not in output, output[output.find("would be ignored") - 600:][:2000]
    (wheel,) = (tmp_path / "dist").glob("hpcdispatch-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for data in ("hpcdispatch/examples/eurora_snapshot.json",
                 "hpcdispatch/sim_adapter/data/KTH-SP2-1996-2.1-cln.slice.swf.xz",
                 "hpcdispatch/v1/dispatcher.proto", "hpcdispatch/py.typed"):
        assert data in names, sorted(n for n in names if not n.endswith(".py"))
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), sorted(
        n for n in names if ".dist-info/" in n)
