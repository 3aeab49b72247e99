"""The tests are laid out by room (issue #35): every test file sits in a folder of the table in
CONTRIBUTING.md, *Where the tests are*, none at the top of tests/, and every folder of the
table holds tests; the folders are packages, and no test finds the repository from its own
place."""

from __future__ import annotations

import re
from pathlib import Path

from tests.paths import DATA, ROOT

TESTS = ROOT / "tests"
SECTION = "## Where the tests are"


def documented_folders() -> dict[str, str]:
    """Folder (relative to the root, ending in "/") -> what its tests test, from the table."""
    text = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")
    section = text[text.index(SECTION):]
    end = section.find("\n## ", len(SECTION))
    section = section if end == -1 else section[:end]
    rows = re.findall(r"^\| `(tests/[\w/]+/)` \| (.+?) \|$", section, re.M)
    return dict(rows)


def all_test_files() -> list[Path]:
    return sorted(p for p in TESTS.rglob("test_*.py") if "__pycache__" not in p.parts)


def test_the_paths_helper_finds_the_repository() -> None:
    assert (ROOT / "pyproject.toml").is_file() and (ROOT / "CONTRIBUTING.md").is_file()
    assert DATA == TESTS / "data" and DATA.is_dir()


def test_the_table_lists_folders_the_pattern_finds() -> None:
    folders = documented_folders()
    assert len(folders) >= 15  # the pattern finds the rows (18 when written)
    assert all(what.strip() for what in folders.values())


def test_no_test_file_stays_at_the_top_of_tests() -> None:
    assert sorted(p.name for p in TESTS.glob("test_*.py")) == []


def test_every_test_file_sits_in_a_documented_folder() -> None:
    folders = documented_folders()
    files = all_test_files()
    assert len(files) > 90  # the listing works (96 when laid out)
    outside = [p.relative_to(ROOT).as_posix() for p in files
               if f"{p.parent.relative_to(ROOT).as_posix()}/" not in folders]
    assert outside == [], "move them to a room's folder, or add the room to CONTRIBUTING.md"


def test_every_documented_folder_holds_tests() -> None:
    empty = [folder for folder in documented_folders()
             if not list((ROOT / folder).glob("test_*.py"))]
    assert empty == []


def test_every_folder_of_tests_is_a_package() -> None:
    """`from tests.server.dispatchers.test_decision_property import snapshots` and the like need
    every folder on the way to be a package."""
    folders = {p.parent for p in all_test_files()}
    folders |= {parent for folder in folders for parent in folder.parents
                if TESTS in (parent, *parent.parents)}
    missing = sorted(f.relative_to(ROOT).as_posix() for f in folders
                     if not (f / "__init__.py").is_file())
    assert missing == []


def test_no_test_file_finds_the_repository_from_its_own_place() -> None:
    """A folder may move: the root is tests/paths.py's ROOT, the data folder its DATA."""
    own_place = re.compile(r"Path\(__file__\)(\.resolve\(\))?\.parent")
    found = [f"{p.relative_to(ROOT)}:{n}" for p in all_test_files()
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if own_place.search(line)]
    assert found == []
