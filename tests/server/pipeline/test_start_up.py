"""What loading the pipeline costs: OR-Tools (and pandas, which its CP-SAT module imports) only
once a CP model is built, never for a baseline (issue #52, item 1).

Each case runs in a fresh interpreter, so that what the test process already imported counts
for nothing, and reads that interpreter's `sys.modules` after the work.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.paths import ROOT

HEAVY = ("ortools", "pandas")
# Appended to each case: which of them the interpreter holds, on its last line of output.
PROBE = f"""
import json, sys
print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & {set(HEAVY)!r})))
"""

# An EASY decision through the pipeline's own door, on a synthetic snapshot.
EASY_DECISION = """
import time
from hpcdispatch.server.domain.search_control import SearchControl
from hpcdispatch.server.domain.profiles import PROFILES
from hpcdispatch.server.pipeline import run_decision
from hpcdispatch.server.predictors.walltime import WalltimePredictor
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import PRESETS
from hpcdispatch.v1 import dispatcher_pb2 as pb

snapshot = synthetic_snapshot(PRESETS["eurora"], 20, 0.7, seed=3)
control = SearchControl(PROFILES["qos"][0], time.monotonic() + 30)
result = run_decision(snapshot, pb.DISPATCHER_EASY, WalltimePredictor(), control)
assert result.fallback_reason == "" and result.decision.starts, result
"""

# An EASY replay of the bundled slice's first jobs, in-process, as a user runs it.
EASY_REPLAY = """
import sys
from hpcdispatch.cli import main
code = main(["simulate", "--in-process", "--dispatcher", "easy", "--predictor", "walltime",
             "--records", "0:10", "--out", sys.argv[1]])
assert code == 0, code
"""

# The model size of a CP dispatcher: the case that does build a model.
CP_MODEL = """
from hpcdispatch.server.domain.profiles import PROFILES
from hpcdispatch.server.pipeline import model_variables
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import PRESETS

snapshot = synthetic_snapshot(PRESETS["eurora"], 40, 0.95, seed=3)
model_variables(snapshot, "pcp20", PROFILES["qos"][0])
"""


def imported_after(code: str, *argv: str) -> set[str]:
    """The top-level packages of `HEAVY` a fresh interpreter holds after running `code`."""
    probe = code + PROBE
    done = subprocess.run([sys.executable, "-c", probe, *argv], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_loading_the_pipeline_imports_no_solver() -> None:
    assert imported_after("import hpcdispatch.server.pipeline") == set()


def test_an_easy_decision_imports_no_solver() -> None:
    assert imported_after(EASY_DECISION) == set()


@pytest.mark.timeout(300)
def test_an_easy_replay_in_process_imports_no_solver(tmp_path: Path) -> None:
    assert imported_after(EASY_REPLAY, str(tmp_path / "replay")) == set()
    assert (tmp_path / "replay").is_dir()


def test_a_cp_model_imports_the_solver_when_it_is_built() -> None:
    """The other side: the lazy import is the one a CP model needs, and it still comes."""
    assert "ortools" in imported_after(CP_MODEL)
