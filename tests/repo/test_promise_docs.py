"""docs/service.md, *Promised starts*: the example runs as shown (issue #42, item 1)."""

from __future__ import annotations

import subprocess
import sys

from tests.paths import ROOT
from tests.repo.test_repo_docs import python_block

T = 1_700_000_000


def test_the_promised_starts_example_runs_as_shown() -> None:
    code = python_block("docs/service.md", "A promise lives in the server that made it")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"{T} a starts in 1000 s, promised 0",
        f"{T} b starts in 2000 s, promised 0",
        f"{T + 60} a starts in 940 s, promised 0",
        f"{T + 60} b starts in 1940 s, promised 0",
        "forged: []",
    ]
