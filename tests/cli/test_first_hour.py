"""A new user's first hour with the replay commands (issue #33, item 7): runs of two search
profiles are two rows, runs of different workloads are refused (or tagged) in one report, a
wrong --system lists the presets, an empty record range is refused, the progress bar names
what it replays, and scripts/main.sh started from another folder prints paths that work from
there."""

from __future__ import annotations

import csv
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from hpcdispatch.cli import main
from tests.paths import ROOT
from tests.sim_adapter.test_report import WAITS, table_rows, write_run

CLI = [sys.executable, "-m", "hpcdispatch"]
SLICE = "KTH-SP2-1996-2.1-cln.slice"  # the bundled trace, 3,000 records


def simulate(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "simulate", "--in-process", *args], capture_output=True,
                          text=True, timeout=600, cwd=cwd)


def one_error_line(done: subprocess.CompletedProcess[str], command: str) -> str:
    """The error a refused command printed: exit 2, one line, no traceback."""
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert all(line.startswith(f"hpcdispatch {command}: ") for line in lines), done.stderr
    return lines[-1]


# -- profiles in the label, workloads in the report ------------------------------------------


def test_runs_of_two_profiles_are_two_rows_each_counting_its_own_sequences(
        tmp_path: Path) -> None:
    common = ["--trace", "lublin-256", "--sequences", "2", "--sequence-length", "40",
              "--dispatcher", "pcp20", "--no-progress"]
    qos = simulate(*common, "--profile", "qos", "--out", str(tmp_path / "qos"))
    default = simulate(*common, "--out", str(tmp_path / "default"))
    assert qos.returncode == 0 and default.returncode == 0, qos.stderr + default.stderr
    done = subprocess.run([*CLI, "report", "--no-plots", str(tmp_path / "qos"),
                           str(tmp_path / "default")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    # The last table: the aggregate (the book's runs add one of their promises before it).
    aggregated = table_rows(done.stdout.strip().split("\n\n")[-1])
    assert {name: row["runs"] for name, row in aggregated.items()} == {
        "pcp20-qos-walltime": "2", "pcp20-book-walltime": "2"}
    assert done.stdout.startswith("workload: lublin_256.swf.xz, sequences of 40 jobs, seed 1")


def test_runs_written_before_labels_named_the_profile_get_it_in_the_report(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for profile in ("fast", "qos"):
        for sequence in (0, 1):
            run = write_run(tmp_path / f"{profile}-seq{sequence}", "pcp20-walltime", WAITS,
                            [600] * len(WAITS), sequence=sequence)
            summary = json.loads((run / "summary.json").read_text())
            (run / "summary.json").write_text(json.dumps({**summary, "profile": profile,
                                                          "dispatcher": "pcp20"}))
    assert main(["report", "--no-plots", str(tmp_path)]) == 0
    tables = capsys.readouterr().out.split("\n\n")
    assert {name: row["runs"] for name, row in table_rows(tables[-1]).items()} == {
        "pcp20-fast-walltime": "2", "pcp20-qos-walltime": "2"}


def two_traces(root: Path) -> list[str]:
    folders = []
    for trace in ("kth.swf.xz", "lublin_256.swf.xz"):
        run = write_run(root / trace, "easy-walltime", WAITS, [600] * len(WAITS))
        summary = json.loads((run / "summary.json").read_text())
        (run / "summary.json").write_text(json.dumps({**summary, "trace": f"/data/{trace}"}))
        folders.append(str(run))
    return folders


def test_runs_of_different_traces_are_refused_in_one_report(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--no-plots", *two_traces(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    error = captured.err.strip()
    assert "\n" not in error
    assert error.startswith("hpcdispatch report: the runs replay 2 different workloads")
    assert "kth.swf.xz (1 run); lublin_256.swf.xz (1 run)" in error
    assert "--mixed-traces" in error


def test_mixed_traces_tags_each_run_with_its_workload(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", "--no-plots", "--mixed-traces", *two_traces(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "W1 = kth.swf.xz\nW2 = lublin_256.swf.xz\n" in out
    assert set(table_rows(out.split("\n", 3)[3])) == {"easy-walltime [W1]",
                                                      "easy-walltime [W2]"}


# -- refusals that say what to do -------------------------------------------------------------


def test_a_wrong_system_lists_the_presets_and_the_other_forms(tmp_path: Path) -> None:
    done = simulate("--system", "kit", "--limit-jobs", "5", "--no-progress",
                    "--out", str(tmp_path / "runs"))
    assert one_error_line(done, "simulate") == (
        "hpcdispatch simulate: system 'kit': no such preset or file; give a preset "
        "(atlas-features, atlas-partitions, atlas-priority, eurora, kit-forhlr2) or a YAML / "
        "JSON file, or "
        "NODESxCORES such as 256x4")
    assert not (tmp_path / "runs").exists()


def test_an_empty_record_range_is_refused(tmp_path: Path) -> None:
    done = simulate("--records", "5000:6000", "--dispatcher", "fcfs", "--no-progress",
                    "--out", str(tmp_path / "runs"))
    error = one_error_line(done, "simulate")
    assert re.fullmatch(rf"hpcdispatch simulate: record window 5000:6000: \S+{SLICE}\.swf\.xz "
                        r"has 3,000 job records \(0:3000\), none of them in the window", error)
    assert not any((tmp_path / "runs").glob("*"))


# -- what the user sees while it runs, and where ----------------------------------------------


def test_the_progress_bar_names_the_run_and_the_trace(tmp_path: Path) -> None:
    done = simulate("--limit-jobs", "20", "--dispatcher", "fcfs", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    bar = [part for part in re.split(r"[\r\n]", done.stderr) if "job/s" in part or "%|" in part]
    assert bar, done.stderr
    assert all(part.startswith(f"fcfs-data-driven on {SLICE}: ") for part in bar), bar


def test_main_sh_from_another_folder_prints_paths_that_work_there(tmp_path: Path) -> None:
    out = f"runs/main-sh-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "HPCDISPATCH_VENV": sys.prefix}
    try:
        done = subprocess.run(
            ["bash", str(ROOT / "scripts" / "main.sh"), "--in-process", "--records", "0:30",
             "--dispatcher", "fcfs", "--no-progress", "--out", out],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        hint = re.search(r"^runs in (\S+)/; plots: (.+)$", done.stdout, re.M)
        assert hint is not None, done.stdout
        assert (tmp_path / hint.group(1) / "01-fcfs" / "summary.json").exists(), hint.group(1)
        again = subprocess.run([*shlex.split(hint.group(2)), "--no-plots"], cwd=tmp_path,
                               capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr
    finally:  # where main.sh wrote before it ran where it is started
        shutil.rmtree(ROOT / out, ignore_errors=True)


# -- issue #43's first hour --------------------------------------------------------------------


@pytest.mark.parametrize("records", ["0:9999999", "2999:3001"])
def test_a_record_window_past_the_trace_is_refused(tmp_path: Path, records: str) -> None:
    """The docs say so; it replayed what there was."""
    done = simulate("--records", records, "--dispatcher", "fcfs", "--no-progress",
                    "--out", str(tmp_path / "runs"))
    error = one_error_line(done, "simulate")
    assert re.fullmatch(rf"hpcdispatch simulate: record window {records}: \S+{SLICE}\.swf\.xz "
                        r"has 3,000 job records \(0:3000\), the window ends past them", error)
    assert not (tmp_path / "runs").exists()


def test_a_negative_record_window_is_refused_by_what_is_wrong_with_it(tmp_path: Path) -> None:
    """It read argparse's "expected one argument"."""
    done = simulate("--records", "-5:10", "--dispatcher", "fcfs", "--out", str(tmp_path))
    assert one_error_line(done, "simulate") == (
        "hpcdispatch simulate: record window '-5:10': need 0 <= FIRST < LAST")


def test_decisions_name_the_dispatcher_and_predictor_by_their_registered_names(
        tmp_path: Path) -> None:
    """decisions.csv wrote `data_driven` and `easy_sjf` (the enum's names)."""
    done = simulate("--records", "0:40", "--dispatcher", "easy-sjf", "--predictor",
                    "data-driven", "--no-progress", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    (run_dir,) = tmp_path.iterdir()
    with (run_dir / "decisions.csv").open(newline="") as rows:
        named = {(row["dispatcher"], row["predictor"]) for row in csv.DictReader(rows)}
    assert named == {("easy-sjf", "data-driven")}
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["dispatcher"], summary["predictor"]) == ("easy-sjf", "data-driven")
