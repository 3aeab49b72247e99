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

from tests.paths import ROOT

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


def python_block(page: str, after: str) -> str:
    """The first ```python block of `page` after the line containing `after`."""
    text = (ROOT / page).read_text(encoding="utf-8")
    start = text.index("```python\n", text.index(after)) + len("```python\n")
    return text[start : text.index("```", start)]


def test_the_session_plugin_example_runs_as_shown() -> None:
    """docs/service.md, *Sessions* (moved there from the README)."""
    code = python_block("docs/service.md", "A workload-manager plugin keeps one session")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "1700000000 {'a': ['n1'], 'b': ['n2']}"
    assert lines[1] in ("1700000600 {'c': ['n1']}", "1700000600 {'c': ['n2']}")
    assert lines[2] == "decided on deltas: 1 full re-sends: 0"


# Every fenced block of the front pages and docs/**/*.md names its language; a shell block is
# run by test_the_runnable_command_blocks_run_verbatim_in_a_fresh_copy when the line before its
# fence is RUN, and otherwise says why it cannot run here with NOT_RUN (Docker, a Slurm cluster,
# a server that runs until stopped, a replay of hours).
FRONT_PAGES = ("README.md", "BENCHMARKS.md", "CONTRIBUTING.md")
DOCS = (*FRONT_PAGES,
        *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md")))
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


# A python block that uses a name it neither defines nor imports stands for the reader's own
# code around it: the line before its fence says so, and what the names stand for.
FRAGMENT = re.compile(r"<!-- fragment: \S.* -->")
PYTHON_BLOCKS = [block for block in BLOCKS if block.language == "python"]


def test_every_python_block_defines_what_it_uses_or_says_it_is_a_fragment() -> None:
    """Three blocks used `t`, `full_request` and `request` unmarked (issue #51)."""
    undefined = []
    for block in PYTHON_BLOCKS:
        if FRAGMENT.fullmatch(block.marker):
            continue
        done = subprocess.run(
            [sys.executable, "-m", "ruff", "check", "--isolated", "--select", "F821",
             "--stdin-filename", "block.py", "-"],
            input=block.text, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            undefined.append(f"{block.where}:\n{done.stdout}{done.stderr}")
    assert len(PYTHON_BLOCKS) >= 7  # the parser finds them (8 when written)
    assert undefined == [], (
        "define or import what the block uses, or put '<!-- fragment: what the names stand "
        "for -->' on the line before it:\n" + "\n".join(undefined))


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


# -- front pages that are maps (issue #35, item 5) ------------------------------------------------

# The front pages stay short: their long text lives in docs/ and docs/benchmarks/.
MOST_LINES = {"README.md": 250, "BENCHMARKS.md": 300}


@pytest.mark.parametrize(("page", "most"), sorted(MOST_LINES.items()))
def test_the_front_pages_are_maps_of_at_most_so_many_lines(page: str, most: int) -> None:
    lines = len((ROOT / page).read_text(encoding="utf-8").splitlines())
    assert lines <= most, f"{page} has {lines} lines: move its long text to a page of docs/"


def test_the_readme_still_starts_with_the_two_commands() -> None:
    """The first block of the README is the main job and the test suite."""
    first = next(b for b in fenced_blocks("README.md") if b.language in SHELL)
    assert [line.split()[0] for line in first.text.splitlines()] == [
        "./scripts/main.sh", "./scripts/test.sh"]
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert text.index("./scripts/main.sh") < text.index("\n## ")


def test_every_benchmarks_section_has_its_page_and_the_map_links_it() -> None:
    """Each top-level section (1-9, Appendices A and B) is a page of docs/benchmarks/ whose
    heading carries its number, and BENCHMARKS.md links every page."""
    front = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    pages = sorted((ROOT / "docs" / "benchmarks").glob("*.md"))
    numbers = set()
    for page in pages:
        heading = page.read_text(encoding="utf-8").splitlines()[0]
        number = re.match(r"^# (\d+\.|Appendix [A-Z]\.) \S", heading)
        assert number, f"{page.name}: {heading}"
        numbers.add(number.group(1))
        assert f"](docs/benchmarks/{page.name})" in front, page.name
    assert numbers == {*(f"{n}." for n in range(1, 10)), "Appendix A.", "Appendix B."}


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[`*_]|<[^>]+>", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in _outside_fences(page):
        if m := re.match(r"^#{1,6} (.+?)\s*#*$", line):
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def _outside_fences(page: Path) -> list[str]:
    lines, fence = [], False
    for line in page.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line) or (fence and line.strip() == "```"):
            fence = not fence
        elif not fence:
            lines.append(line)
    return lines


def test_every_relative_link_of_the_docs_resolves() -> None:
    """Every link of README.md, BENCHMARKS.md, CONTRIBUTING.md and docs/**/*.md that is not a
    URL names a file or folder of the repository, and its #anchor a heading of that page."""
    checked, broken = 0, []
    for name in DOCS:
        page = ROOT / name
        for target in LINK.findall("\n".join(_outside_fences(page))):
            if re.match(r"[a-z][a-z+.-]*:", target):  # https:, mailto:, ...
                continue
            checked += 1
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists() or ROOT not in (resolved, *resolved.parents):
                broken.append(f"{name}: {target}")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{name}: {target} (no such heading)")
    assert checked > 80  # the pattern finds them (98 when written)
    assert broken == []
