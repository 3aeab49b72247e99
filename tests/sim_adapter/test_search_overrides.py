"""`simulate --search KEY=VALUE`: a SearchParameters field over the profile's on every request,
as a rung of the promise book's ladder is replayed (issue #41): it reaches the decisions on the
gRPC and the in-process path alike, the run's label and summary name it, and a key or value
that is not a search parameter's is refused before any replay."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "hpcdispatch", "simulate"]
REPLAY = ["--records", "0:150", "--dispatcher", "pcp20", "--predictor", "walltime",
          "--profile", "book", "--no-progress"]


def replay(out: Path, *extra: str) -> dict[str, object]:
    done = subprocess.run([*CLI, *REPLAY, *extra, "--out", str(out)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    (summary,) = out.glob("*/summary.json")
    result: dict[str, object] = json.loads(summary.read_text())
    result["jobs.csv"] = (summary.parent / "jobs.csv").read_text()
    return result


@pytest.mark.parametrize("path", [[], ["--in-process"]], ids=["grpc", "in-process"])
def test_an_override_reaches_the_decisions_and_is_named(tmp_path: Path, path: list[str]) -> None:
    arrival = replay(tmp_path / "arrival", *path, "--search", "promise_after_s=0")
    head = replay(tmp_path / "head", *path, "--search", "promise_after_s=2000000000",
                  "--search", "capacity_first=true")
    assert arrival["search"] == {"promise_after_s": 0}
    assert head["search"] == {"promise_after_s": 2_000_000_000, "capacity_first": True}
    assert arrival["label"] == "pcp20-book+promise_after_s=0-walltime"
    assert head["label"] == "pcp20-book+promise_after_s=2000000000+capacity_first=true-walltime"
    # Every job promised at arrival, or only the oldest: other decisions, other schedules.
    assert arrival["jobs.csv"] != head["jobs.csv"]


def test_the_in_process_and_grpc_paths_agree_under_an_override(tmp_path: Path) -> None:
    grpc = replay(tmp_path / "grpc", "--search", "promise_after_s=600")
    local = replay(tmp_path / "local", "--in-process", "--search", "promise_after_s=600")
    assert grpc["jobs.csv"] == local["jobs.csv"]


@pytest.mark.parametrize(("override", "says"), [
    ("bogus=1", "'bogus=1': not KEY=VALUE with KEY one of"),
    ("promise_after_s", "'promise_after_s': not KEY=VALUE"),
    ("promise_after_s=soon", "promise_after_s is an integer"),
    ("more_orders=1", "more_orders is true or false"),
    ("profile=qos", "not KEY=VALUE"),  # the profile has its own flag
])
def test_what_is_no_search_parameter_is_refused_before_a_replay(
    tmp_path: Path, override: str, says: str,
) -> None:
    done = subprocess.run([*CLI, *REPLAY, "--search", override, "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert says in done.stderr, done.stderr
    assert not (tmp_path / "o").exists()
