"""Where the suite's files are, from any folder of tests/: the repository's root and tests/data/.

A test file computes no path from its own place (`Path(__file__).parents[n]`): the folder it
sits in may move (tests/ is laid out by room, CONTRIBUTING.md *Where the tests are*)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
