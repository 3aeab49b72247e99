"""Docs and docstrings cite only what a clone of the repository has."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Files of the project's shared folder, which lies outside the repository.
OUTSIDE = re.compile(r"(?<!\.\./shared/)\b(DESIGN\.md|traces/README\.md)")
TEXT = (".py", ".md", ".toml", ".yaml", ".yml", ".proto", ".sh", ".cfg")


def tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / name for name in listed.splitlines() if name.endswith(TEXT)]


def test_no_file_cites_the_shared_design_notes_as_if_they_were_in_the_repo() -> None:
    files = tracked_text_files()
    assert any(f.name == "README.md" for f in files)  # the listing works
    this = Path(__file__).resolve()
    cited = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in files if path.resolve() != this and path.exists()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if OUTSIDE.search(line)
    ]
    assert cited == [], "say what the reference means in place:\n" + "\n".join(cited)


def readme_python_block(after: str) -> str:
    """The first ```python block of README.md after the line containing `after`."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("```python\n", text.index(after)) + len("```python\n")
    return text[start : text.index("```", start)]


def test_the_readme_session_plugin_example_runs_as_shown() -> None:
    code = readme_python_block("A workload-manager plugin keeps one session")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "1700000000 {'a': ['n1'], 'b': ['n2']}"
    assert lines[1] in ("1700000600 {'c': ['n1']}", "1700000600 {'c': ['n2']}")
    assert lines[2] == "decided on deltas: 1 full re-sends: 0"
