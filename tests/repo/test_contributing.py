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


def section(title: str) -> str:
    """The text of CONTRIBUTING.md's section `## title`, up to the next section."""
    start = TEXT.index(f"\n## {title}\n")
    end = TEXT.find("\n## ", start + 1)
    return TEXT[start:end if end >= 0 else len(TEXT)]


def test_the_recipes_name_the_steps_a_new_contributor_missed() -> None:
    """Issue #43's first hour: the built-in recipes omitted regenerating the proto (a replay
    whose decisions all fell back) and the entry points' order (a listed test failed); the CP
    model recipe named `decide()` where a model is a Formulation and a short dispatcher; the
    RPC recipe omitted the intake's check and the stream path."""
    for kind in ("A dispatcher", "A predictor"):
        recipe = section(kind)
        assert ".venv/bin/python scripts/gen_proto.py" in recipe, kind
        assert "in the\n   enum's order" in recipe or "in the enum's order" in recipe, kind
    dispatcher = section("A dispatcher")
    assert "`Formulation`" in dispatcher and "`CpDispatcher`" in dispatcher
    assert "every decision of ... was the fallback's" in dispatcher
    rpc = section("An RPC")
    assert "`server/intake/validation.py`" in rpc
    assert "the stream path" in rpc and "`server/rpc/session_stream.py` `StreamCalls`" in rpc
