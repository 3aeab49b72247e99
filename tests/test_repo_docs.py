"""Docs and docstrings cite only what a clone of the repository has."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

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


# Every fenced block of README.md and docs/*.md names its language; a shell block is run by
# test_the_runnable_command_blocks_run_verbatim_in_a_fresh_copy when the line before its fence
# is RUN, and otherwise says why it cannot run here with NOT_RUN (Docker, a Slurm cluster, a
# server that runs until stopped, a replay of hours).
DOCS = ("README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")))
SHELL = {"bash", "sh", "shell", "console"}
RUN = "<!-- run in tests -->"
NOT_RUN = re.compile(r"<!-- not run in tests: \S.* -->")
FENCE = re.compile(r"^\s*```(\S*)\s*$")


@dataclass(frozen=True, slots=True)
class Block:
    where: str  # file:line of the opening fence
    language: str
    text: str
    marker: str  # the last non-blank line before the fence, stripped

    @property
    def runs(self) -> bool:
        return self.marker == RUN


def fenced_blocks(name: str) -> list[Block]:
    lines = (ROOT / name).read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    number = 0
    while number < len(lines):
        opening = FENCE.match(lines[number])
        if opening is None:
            number += 1
            continue
        end = next(i for i in range(number + 1, len(lines)) if lines[i].strip() == "```")
        indent = len(lines[number]) - len(lines[number].lstrip())
        before = [line.strip() for line in lines[:number] if line.strip()]
        blocks.append(Block(
            f"{name}:{number + 1}", opening.group(1),
            "\n".join(line[indent:] for line in lines[number + 1 : end]) + "\n",
            before[-1] if before else "",
        ))
        number = end + 1
    return blocks


BLOCKS = [block for name in DOCS for block in fenced_blocks(name)]
SHELL_BLOCKS = [block for block in BLOCKS if block.language in SHELL]


def test_the_docs_have_command_blocks_of_both_kinds() -> None:
    assert len(SHELL_BLOCKS) >= 10  # the parser finds them (README: main.sh, replays, ...)
    assert any(b.runs for b in SHELL_BLOCKS) and not all(b.runs for b in SHELL_BLOCKS)


def test_every_fenced_block_names_its_language() -> None:
    """An untagged block could be a command nobody runs: each says bash, text, yaml..."""
    assert [b.where for b in BLOCKS if not b.language] == []


def test_every_command_block_is_run_in_tests_or_says_why_not() -> None:
    unmarked = [f"{b.where}: {b.text.splitlines()[0]}" for b in SHELL_BLOCKS
                if not b.runs and not NOT_RUN.fullmatch(b.marker)]
    assert unmarked == [], (
        f"put {RUN} (quick, runs from a fresh clone) or '<!-- not run in tests: why -->' on "
        "the line before each:\n" + "\n".join(unmarked))


@pytest.fixture(scope="module")
def fresh_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository's files as a clone has them, with the virtual environment the tests run
    in as its .venv (what scripts/bootstrap.sh makes on a fresh clone)."""
    copy = tmp_path_factory.mktemp("clone")
    for path in listed_files():
        target = copy / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    (copy / ".venv").symlink_to(Path(sys.prefix))
    return copy


def listed_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return [ROOT / name for name in listed.splitlines() if (ROOT / name).is_file()]


@pytest.mark.parametrize("block", [b for b in SHELL_BLOCKS if b.runs], ids=lambda b: b.where)
def test_the_runnable_command_blocks_run_verbatim_in_a_fresh_copy(block: Block,
                                                                  fresh_copy: Path) -> None:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("HPCDISPATCH_", "VIRTUAL_ENV"))}
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block.text], cwd=fresh_copy,
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{block.where}\n{block.text}\n{done.stdout}\n{done.stderr}"
