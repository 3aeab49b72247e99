"""The README shows what `./scripts/main.sh` prints on a fresh clone; this test runs the same
replays (main.sh is `hpcdispatch simulate` with no arguments, after setting up .venv) and
compares every figure that does not depend on the machine: the search is deterministic, so
only the decision and replay times vary."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import ROOT
from tests.sim_adapter.test_report import table_rows

INTRO = "On a fresh clone, `./scripts/main.sh` ends with"
# Columns measured in wall time: they differ from machine to machine.
TIMINGS = {"dec p50 [ms]", "dec p99 [ms]", "dec max [ms]", "replay [s]"}


def readme_output() -> str:
    """The text block after INTRO in README.md."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("```text\n", text.index(INTRO)) + len("```text\n")
    return text[start : text.index("```", start)]


def parts(output: str) -> tuple[str, str, str]:
    """(the trace line, the two tables, the closing hint) of simulate's standard output."""
    lines = output.strip().splitlines()
    return lines[0], "\n".join(lines[1:-2]), lines[-1]


def comparable(tables: str) -> dict[str, dict[str, str]]:
    return {run: {k: v for k, v in row.items() if k not in TIMINGS}
            for run, row in table_rows(tables).items()}


def test_the_readme_block_parses() -> None:
    trace, tables, hint = parts(readme_output())
    assert trace.startswith("trace KTH-SP2")
    rows = table_rows(tables)
    assert set(rows) == {"pcp20(default)-book-data-driven", "easy-data-driven"}
    assert all("mean bsld" in row and "decisions" in row for row in rows.values())
    assert hint.startswith("runs in replay-")


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_the_readme_shows_what_main_sh_prints(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hpcdispatch.cli", "simulate", "--no-progress",
         "--out", str(tmp_path / "replay")],
        cwd=ROOT, capture_output=True, text=True, timeout=3300,
    )
    assert done.returncode == 0, done.stderr
    printed_trace, printed_tables, printed_hint = parts(done.stdout)
    shown_trace, shown_tables, _ = parts(readme_output())
    assert shown_trace == printed_trace
    assert comparable(shown_tables) == comparable(printed_tables), (
        "update the README's main.sh output:\n" + done.stdout)
    assert printed_hint.startswith("runs in ")
