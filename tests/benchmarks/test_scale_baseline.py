"""`scale --sessions --baseline-commit REV`: an older commit's server, side by side.

The layout of an exported commit is checked without a server; one small smoke test starts the
server of the commit issue #12 was filed at and times a 64-node case on it (skipped where the
checkout lacks that commit, e.g. a shallow clone)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from benchmarks.scale import sessions
from benchmarks.scale.baseline_server import REPO, baseline_server, package_tree
from benchmarks.scale.sessions import SessionRow, header
from hpcdispatch.server.rpc.embedded import embedded_server

ISSUE_12_FILED_AT = "a8b54e1"


def _have(rev: str) -> bool:
    return subprocess.run(["git", "-C", str(REPO), "cat-file", "-e", f"{rev}^{{commit}}"],
                          capture_output=True).returncode == 0


def test_the_package_tree_follows_pyproject_s_package_dirs(tmp_path: Path) -> None:
    source = tmp_path / "source"
    for folder in ("hpcdispatch", "server/dispatchers", "proto/hpcdispatch/v1"):
        (source / folder).mkdir(parents=True)
        (source / folder / "__init__.py").write_text(f"WHERE = {folder!r}\n")
    (source / "pyproject.toml").write_text(
        '[tool.setuptools]\npackage-dir = { "hpcdispatch" = "hpcdispatch", '
        '"hpcdispatch.v1" = "proto/hpcdispatch/v1", "hpcdispatch.server" = "server", '
        '"hpcdispatch.server.dispatchers" = "server/dispatchers" }\n')
    tree = package_tree(source, tmp_path / "tree")
    for name, folder in (("hpcdispatch", "hpcdispatch"), ("hpcdispatch/v1", "proto/hpcdispatch/v1"),
                         ("hpcdispatch/server/dispatchers", "server/dispatchers")):
        assert (tree / name / "__init__.py").read_text() == f"WHERE = {folder!r}\n"


def test_rows_with_a_baseline_have_its_columns() -> None:
    row = SessionRow(100, 70, 10, "easy", full_p50_ms=500, session_p50_ms=50, session_mb=1,
                     started_equal=True, baseline_p50_ms=10_000)
    head, rule = header("a8b54e1").splitlines()
    assert head.count("|") == row.markdown().count("|") == rule.count("|")
    assert row.markdown().endswith("| 10,000 | 20.0× | 200.0× |")
    assert SessionRow(100, 70, 10, "easy", 500, 50, 1, True).markdown().count("|") == \
        header().splitlines()[0].count("|")


@pytest.mark.slow
@pytest.mark.skipif(not _have(ISSUE_12_FILED_AT), reason=f"{ISSUE_12_FILED_AT} not in this clone")
def test_the_old_server_answers_side_by_side(capsys: pytest.CaptureFixture[str]) -> None:
    with embedded_server() as target, baseline_server(ISSUE_12_FILED_AT) as old:
        rows = sessions.run(target, [(64, 10)], ["easy"], repeats=1, timeout=60,
                                  baseline=(ISSUE_12_FILED_AT, old))
    assert len(rows) == 1 and rows[0].baseline_p50_ms is not None
    assert rows[0].baseline_p50_ms > 0 and rows[0].started_equal
    assert f"{ISSUE_12_FILED_AT} / session" in capsys.readouterr().out
