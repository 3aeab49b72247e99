"""CONTRIBUTING.md cites what the repository has: every file, every test, every name it points
at in a file."""

from __future__ import annotations

import re

from tests.paths import ROOT

TEXT = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")

# `path` or `path::test_name`, a path being a file (with its extension) or a folder (with "/").
CITED = re.compile(r"`((?:[\w.-]+/)+(?:[\w.-]+\.(?:py|proto|toml|md|json|sh))?|[\w-]+\.(?:md|toml))"
                   r"(?:::(\w+))?`")
# `path` `name`: a name the file defines or holds (a function, a constant, a class).
NAMED = re.compile(r"`((?:[\w.-]+/)+[\w.-]+\.(?:py|proto|toml))` `(\w+)`")


def test_every_cited_file_and_test_exists() -> None:
    cited = CITED.findall(TEXT)
    assert len(cited) > 40  # the pattern finds them
    missing = [path for path, _ in cited if not (ROOT / path).exists()]
    assert missing == []
    tests = [(path, name) for path, name in cited if name]
    assert len(tests) >= 10
    absent = [f"{path}::{name}" for path, name in tests
              if not re.search(rf"^def {name}\(", (ROOT / path).read_text(encoding="utf-8"),
                               re.M)]
    assert absent == []


def test_every_name_cited_in_a_file_is_in_it() -> None:
    named = NAMED.findall(TEXT)
    assert len(named) >= 10
    absent = [f"{path} {name}" for path, name in named
              if not re.search(rf"\b{name}\b", (ROOT / path).read_text(encoding="utf-8"))]
    assert absent == []


def test_the_entry_point_groups_it_names_are_the_registrations() -> None:
    from hpcdispatch.registrations import DISPATCHER_GROUP, PREDICTOR_GROUP

    assert f'[project.entry-points."{DISPATCHER_GROUP}"]' in TEXT
    assert f'[project.entry-points."{PREDICTOR_GROUP}"]' in TEXT
