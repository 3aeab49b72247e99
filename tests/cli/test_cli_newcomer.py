"""The command line as a newcomer meets it (issue #23, items 5-7): hints that run, one-line
errors instead of tracebacks and reprs, no half-written run folders, help that matches the
code, a warning for a flag that does nothing, the subcommand's own usage."""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest

from hpcdispatch.server.domain.profiles import PROFILES, RETIRED
from hpcdispatch.sim_adapter import cli as sim_cli

CLI = [sys.executable, "-m", "hpcdispatch"]
VENV_BIN = str(Path(sys.executable).parent)


def run(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
        timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd, env=env)


def without_venv_on_path() -> dict[str, str]:
    """The environment of a fresh shell: the virtual environment's bin/ is not on PATH."""
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if p and os.path.realpath(p) != os.path.realpath(VENV_BIN))
    return {**os.environ, "PATH": path}


# -- item 5: hints that run ------------------------------------------------------------------


def test_the_plots_hint_after_a_replay_runs_as_printed(tmp_path: Path) -> None:
    done = run("simulate", "--limit-jobs", "20", "--dispatcher", "fcfs", "--out", "runs",
               "--no-progress", cwd=tmp_path, env=without_venv_on_path())
    assert done.returncode == 0, done.stderr
    hint = re.search(r"plots: (.+)$", done.stdout, re.M)
    assert hint is not None, done.stdout
    command = shlex.split(hint.group(1))
    assert command[0] != "hpcdispatch"  # not on PATH in a fresh shell: it would not be found
    again = subprocess.run([*command, "--no-plots"], capture_output=True, text=True,
                           timeout=120, cwd=tmp_path, env=without_venv_on_path())
    assert again.returncode == 0, again.stderr
    assert "fcfs" in again.stdout


# -- item 6: one-line errors, no half-written run folders -----------------------------------


def test_an_unknown_profile_is_refused_before_the_replay(tmp_path: Path) -> None:
    done = run("simulate", "--profile", "turbo", "--limit-jobs", "20", "--out",
               str(tmp_path / "out"), "--no-progress")
    assert done.returncode == 2
    names = ", ".join(sorted(PROFILES))
    assert re.search(r"--profile turbo: the server at \S+ has no such search profile; one of "
                     + re.escape(names), done.stderr), done.stderr
    assert "_InactiveRpcError" not in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("retired", ["packing", "promises", "fast"])
def test_a_retired_profile_is_refused_saying_what_replaced_it(tmp_path: Path,
                                                              retired: str) -> None:
    """As the server's config error and INVALID_ARGUMENT say it (on main: only "no such
    search profile")."""
    done = run("simulate", "--profile", retired, "--limit-jobs", "20", "--out",
               str(tmp_path / "out"), "--no-progress")
    assert done.returncode == 2
    assert (f"--profile {retired}: profile {retired!r} was retired (issue #49); use "
            f"{RETIRED[retired]}") in done.stderr, done.stderr
    assert "no such search profile" in done.stderr
    assert not (tmp_path / "out").exists()


class Refused(grpc.RpcError, grpc.Call):
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.INVALID_ARGUMENT

    def details(self) -> str:
        return "search.profile: unknown"

    def __repr__(self) -> str:
        return "<_InactiveRpcError of RPC that terminated with: ...>"

    initial_metadata = trailing_metadata = is_active = time_remaining = cancel = (
        add_callback) = lambda self, *a: None  # type: ignore[assignment]


def test_a_failed_replay_leaves_no_half_written_run_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "out" / "01-pcp20"

    def failing_replay(spec: Any, target: str, out_dir: Path, **_: Any) -> dict[str, Any]:
        out_dir.mkdir(parents=True)
        (out_dir / "jobs.csv").write_text("job_id\n")
        raise Refused()

    with pytest.raises(Refused):
        sim_cli._replay_or_clean_up(failing_replay, None, "t", run_dir)
    assert not run_dir.exists() and not run_dir.parent.exists()
    assert "removed the incomplete run folder" in capsys.readouterr().err
    assert sim_cli.rpc_error_text(Refused()) == "INVALID_ARGUMENT: search.profile: unknown"


def test_a_failing_call_mid_replay_is_one_line(tmp_path: Path) -> None:
    done = run("simulate", "--limit-jobs", "200", "--dispatcher", "pcp20", "--timeout", "0.001",
               "--out", str(tmp_path / "out"), "--no-progress")
    assert done.returncode == 1
    assert re.search(r"^hpcdispatch simulate: DEADLINE_EXCEEDED: ", done.stderr, re.M), (
        done.stderr)
    assert "_InactiveRpcError" not in done.stderr and "Traceback" not in done.stderr
    runs = list((tmp_path / "out").glob("*")) if (tmp_path / "out").exists() else []
    assert all((r / "summary.json").exists() for r in runs)


# -- item 7: help that matches the code; warnings; the subcommand's usage -------------------


def test_serve_help_derives_the_profiles_and_names_both_stores() -> None:
    done = run("serve", "--help")
    text = " ".join(done.stdout.split())
    assert "{" + ",".join(sorted(PROFILES)) + "}" in text and "(default: book;" in text
    assert "papers | fast" not in text
    assert "SQLite file path, or a postgresql://" in text


def test_dispatch_help_names_the_bundled_example() -> None:
    text = " ".join(run("dispatch", "--help").stdout.split())
    assert "hpcdispatch/examples/eurora_snapshot.json" in text


def test_a_profile_for_baselines_only_is_refused(tmp_path: Path) -> None:
    """Issue #43: `easy --profile fast` (a profile issue #49 retired; `qos` here) replayed EASY
    and recorded the profile as if it applied."""
    done = run("simulate", "--profile", "qos", "--dispatcher", "easy", "--limit-jobs", "20",
               "--out", str(tmp_path / "out"), "--no-progress", "--in-process")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "hpcdispatch simulate: --profile qos applies to the CP dispatchers (hcp19, pcp19, "
        "pcp20) only; easy ignores it: drop --profile, or add a CP dispatcher")
    assert not (tmp_path / "out").exists()


def test_a_profile_beside_a_baseline_is_warned_about_and_recorded_for_the_cp_run_only(
        tmp_path: Path) -> None:
    done = run("simulate", "--profile", "qos", "--dispatcher", "easy", "--dispatcher", "pcp20",
               "--limit-jobs", "20", "--out", str(tmp_path / "out"), "--no-progress",
               "--in-process")
    assert done.returncode == 0, done.stderr
    assert ("warning: --profile qos applies to the CP dispatchers (hcp19, pcp19, pcp20) only; "
            "easy ignores it (their runs record no profile)") in done.stderr
    recorded = {}
    for run_dir in sorted((tmp_path / "out").iterdir()):
        summary = json.loads((run_dir / "summary.json").read_text())
        with (run_dir / "decisions.csv").open(newline="") as rows:
            profiles = {row["profile"] for row in csv.DictReader(rows)}
        recorded[summary["dispatcher"]] = (summary["profile"], profiles)
    assert recorded == {"easy": ("", {""}), "pcp20": ("qos", {"qos"})}


@pytest.mark.parametrize(("command", "required"), [
    ("simulate", []), ("serve", []), ("dispatch", []), ("report", ["runs"]),
    ("slurm-bridge", ["--partition", "batch"]),
])
def test_an_unknown_flag_after_a_subcommand_prints_its_usage(command: str,
                                                             required: list[str]) -> None:
    done = run(command, *required, "--no-such-flag", timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith(f"usage: hpcdispatch {command} "), done.stderr
    assert "unrecognized arguments: --no-such-flag" in done.stderr


def test_slurm_bridge_log_formats_are_serves() -> None:
    text = " ".join(run("slurm-bridge", "--help").stdout.split())
    assert "--log-format {auto,json,console}" in text
    assert "{kv,json}" not in text
