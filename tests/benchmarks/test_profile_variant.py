"""benchmarks/qos/profile_variant.py: a variant of a server profile, measured by a command to
rerun."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.qos.profile_variant import register
from hpcdispatch.server.domain import profiles
from hpcdispatch.server.domain.search_settings import SearchRequest
from tests.paths import ROOT


@pytest.fixture
def own_profiles(monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    table = dict(profiles.PROFILES)
    monkeypatch.setattr(profiles, "PROFILES", table)
    return table  # type: ignore[return-value]


def test_a_variant_replaces_only_the_fields_it_names(own_profiles: dict[str, object]) -> None:
    name = register("qos", ["easy_head_depth=2", "work_conserving=false"])
    assert name == "qos+easy_head_depth=2+work_conserving=false"
    base, _ = profiles.PROFILES["qos"]
    variant, text = profiles.PROFILES[name]
    assert (variant.easy_head_depth, variant.work_conserving) == (2, False)
    assert (variant.easy_head, variant.delta_ms, variant.window) == (
        base.easy_head, base.delta_ms, base.window)
    assert "qos with" in text
    # A request naming the variant resolves to it, as a named profile does.
    resolved = profiles.resolve_settings(SearchRequest(name), "qos")
    assert resolved.easy_head_depth == 2 and resolved.profile == name


@pytest.mark.parametrize(("base", "fields", "says"), [
    ("nosuch", [], "unknown profile"),
    ("promises", [], "unknown profile"),  # retired by issue #49
    ("qos", ["nosuch=1"], "KEY=VALUE"),
    ("qos", ["easy_head_depth"], "KEY=VALUE"),
    ("qos", ["easy_head=yes"], "true or false"),
    ("qos", ["window=ten"], "integer"),
])
def test_a_bad_variant_is_refused_with_what_is_wrong(
    own_profiles: dict[str, object], base: str, fields: list[str], says: str
) -> None:
    with pytest.raises(ValueError, match=says):
        register(base, fields)


def test_a_replay_with_a_variant_runs_and_names_it(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.qos.profile_variant", "qos", "easy_head=true",
         "easy_head_depth=2",
         "--", "--trace", "kth-sp2-slice", "--limit-jobs", "150", "--dispatcher", "pcp20",
         "--predictor", "walltime", "--no-progress", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr
    (summary,) = out.glob("*/summary.json")
    data = json.loads(summary.read_text())
    assert data["profile"] == "qos+easy_head=true+easy_head_depth=2"
    assert data["jobs"] == 150
