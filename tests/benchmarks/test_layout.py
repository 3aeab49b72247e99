"""benchmarks/ by question (issue #44, item 2): a few packages, each saying which question it
answers and which section of BENCHMARKS.md it feeds, few modules left at the top, and every
benchmark the repository cites by module or by path still there to run."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

import pytest

from tests.paths import ROOT

BENCHMARKS = ROOT / "benchmarks"
PACKAGES = sorted(p.parent for p in BENCHMARKS.glob("*/__init__.py"))
MOST_TOP_LEVEL_MODULES = 8

# A command (`python -m` or `"-m",` then the module), any dotted name under `benchmarks` (an
# import, a module in prose), and a path of a module under benchmarks/.
COMMAND = re.compile(r"""-m["',\s]+(benchmarks(?:\.[a-z_]\w*)+)""")
DOTTED = re.compile(r"(?<![\w/.-])(benchmarks(?:\.[a-z_]\w*)+)")
PATH = re.compile(r"(?<![\w./-])(benchmarks/(?:[\w-]+/)*[\w-]+\.py)\b")
TEXT = (".py", ".md", ".yaml", ".json", ".toml", ".sh")


def tracked_texts() -> dict[str, str]:
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.split()
    return {name: (ROOT / name).read_text(encoding="utf-8") for name in listed
            if name.endswith(TEXT) and (ROOT / name).is_file()}


def cited_modules(texts: dict[str, str]) -> dict[str, set[str]]:
    """Each dotted name under `benchmarks` that a tracked file cites -> the files citing it."""
    cited: dict[str, set[str]] = {}
    for name, text in texts.items():
        for dotted in DOTTED.findall(text):
            cited.setdefault(dotted.rstrip("."), set()).add(name)
    return cited


def resolves(dotted: str) -> bool:
    """A module or package, or a name a module defines (`benchmarks.qos.cases.BASELINES`)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 1, -1):
        module = ".".join(parts[:cut])
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # its parent is no package
            found = False
        if found:
            if cut == len(parts):
                return True
            return hasattr(importlib.import_module(module), parts[cut])
    return False


def test_the_benchmarks_are_a_few_packages_by_question() -> None:
    top_level = sorted(p.name for p in BENCHMARKS.glob("*.py") if p.name != "__init__.py")
    assert len(top_level) <= MOST_TOP_LEVEL_MODULES, top_level
    assert len(PACKAGES) >= 5, [p.name for p in PACKAGES]
    front = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    overview = importlib.import_module("benchmarks").__doc__ or ""
    for package in PACKAGES:
        doc = importlib.import_module(f"benchmarks.{package.name}").__doc__ or ""
        assert "?" in doc.split("\n\n")[0], f"{package.name}: its first paragraph asks a question"
        sections = re.findall(r"§(\d+)", doc)
        assert sections, f"{package.name} names no section of BENCHMARKS.md"
        assert all(f"### {s}. " in front for s in sections), (package.name, sections)
        for page in re.findall(r"docs/benchmarks/[\w-]+\.md", doc):
            assert (ROOT / page).is_file(), (package.name, page)
        assert f"`{package.name}`" in overview, f"benchmarks/__init__.py lists {package.name}"
        modules = sorted(p.stem for p in package.glob("*.py") if not p.stem.startswith("__"))
        assert modules and all(f"`{m}`" in doc for m in modules), (package.name, modules)


def test_every_cited_benchmark_module_and_path_exists() -> None:
    texts = tracked_texts()
    cited = cited_modules(texts)
    assert "benchmarks.qos.targets" in cited and "benchmarks.scale" in cited  # the pattern works
    missing = {dotted: sorted(files) for dotted, files in cited.items() if not resolves(dotted)}
    assert missing == {}
    paths = {path for text in texts.values() for path in PATH.findall(text)}
    assert "benchmarks/qos/verdicts.py" in paths
    assert sorted(p for p in paths if not (ROOT / p).is_file()) == []


def documented_commands() -> list[str]:
    return sorted({m for text in tracked_texts().values() for m in COMMAND.findall(text)})


@pytest.mark.parametrize("module", documented_commands())
def test_every_documented_benchmark_command_starts(module: str) -> None:
    """`python -m MODULE --help` from the repository's root, as the docs run it: the module is
    found and parses its arguments (nothing is run)."""
    done = subprocess.run([sys.executable, "-m", module, "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "usage:" in done.stdout
