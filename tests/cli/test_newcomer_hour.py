"""A newcomer's first hour (issue #51, item 5), through the command line: each mistake of the
list is answered with one line that says what is wrong and what to do, not a traceback or a
wrong cause, and what the commands write says what it is."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

import pytest

CLI = [sys.executable, "-m", "hpcdispatch"]


def run(*args: str, cwd: Path | None = None, timeout: float = 600
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd)


def simulate(*args: str) -> subprocess.CompletedProcess[str]:
    return run("simulate", "--in-process", "--no-progress", *args)


def refused(done: subprocess.CompletedProcess[str], command: str = "simulate") -> str:
    """The one line a refused command printed (exit 2, no traceback)."""
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"hpcdispatch {command}: "), done.stderr
    return lines[0].removeprefix(f"hpcdispatch {command}: ")


# -- the system file: its errors name the file, the line and the key expected ---------------

SYSTEM_FILES = {
    "no-count.yaml": ("name: site\ngroups:\n  - prefix: gpu\n    capacity: {core: 16}\n",
                      "line 3: node group 1 has no 'count': the number of nodes"),
    "no-groups.yaml": ("name: site\ngroup:\n  - prefix: gpu\n",
                       "line 2: unknown key 'group' in the file; its keys are name"),
    "count-word.yaml": ("groups:\n  - {prefix: a, count: 2, capacity: {core: 16}}\n"
                        "  - {prefix: b, count: two, capacity: {core: 16}}\n",
                        "line 3: node group 2: 'count' must be a whole number > 0, not 'two'"),
    "indented.yaml": ("groups:\n  - prefix: gpu\n    count: 4\n      capacity: {core: 16}\n",
                      "line 4, column 15: not a YAML file: mapping values are not allowed"),
    "no-capacity.json": ('{"groups": [\n  {"prefix": "a", "count": 2}\n]}\n',
                         "line 2: node group 1 has no 'capacity'"),
}


@pytest.mark.parametrize("name", sorted(SYSTEM_FILES))
def test_a_wrong_system_file_is_refused_naming_the_file_the_line_and_the_key(
        tmp_path: Path, name: str) -> None:
    """They were bare KeyError('count') / KeyError('groups'), or a syntax error with no line."""
    text, expected = SYSTEM_FILES[name]
    (tmp_path / name).write_text(text, encoding="utf-8")
    error = refused(simulate("--system", str(tmp_path / name), "--limit-jobs", "5",
                             "--dispatcher", "fcfs", "--out", str(tmp_path / "runs")))
    assert error.startswith(f"system {tmp_path / name}, {expected}"), error
    assert not (tmp_path / "runs").exists()


def test_the_system_file_of_the_docs_replays(tmp_path: Path) -> None:
    """docs/replays.md, *System files*: the example as printed."""
    from tests.paths import ROOT

    page = (ROOT / "docs" / "replays.md").read_text(encoding="utf-8")
    section = page[page.index("## System files"):]
    start = section.index("```yaml\n") + len("```yaml\n")
    (tmp_path / "eurora.yaml").write_text(section[start:section.index("```", start)],
                                          encoding="utf-8")
    done = simulate("--system", str(tmp_path / "eurora.yaml"), "--limit-jobs", "20",
                    "--dispatcher", "fcfs", "--out", str(tmp_path / "runs"))
    assert done.returncode == 0, done.stderr
    assert "system eurora (64 nodes, 1024 cores)" in done.stdout


# -- a trace that is not SWF -------------------------------------------------------------------


def test_a_gzip_file_that_is_not_swf_is_said_not_to_be_a_trace(tmp_path: Path) -> None:
    """It was blamed on the header: "the trace header gives neither MaxNodes nor MaxProcs"."""
    import gzip

    trace = tmp_path / "jobs.swf.gz"
    with gzip.open(trace, "wt", encoding="utf-8") as out:
        out.write("job,user,submit\n1,alice,0\n")
    error = refused(simulate("--trace", str(trace), "--dispatcher", "fcfs",
                             "--out", str(tmp_path / "runs")))
    assert error == (f"{trace}:1: not an SWF trace: the first line is 'job,user,submit', "
                     "neither a ';' header comment nor a job record of 18 numbers (expected 18 "
                     "whitespace-separated fields, found 1)")


# -- --out: a file, a folder of earlier runs ---------------------------------------------------


def test_out_naming_a_file_is_a_usage_error(tmp_path: Path) -> None:
    """It printed a NotADirectoryError traceback."""
    (tmp_path / "runs").write_text("my notes\n", encoding="utf-8")
    error = refused(simulate("--records", "0:20", "--dispatcher", "fcfs",
                             "--out", str(tmp_path / "runs")))
    assert error == (f"--out {tmp_path / 'runs'}: is a file, not a folder; give a folder for "
                     "the runs (one that does not exist is made)")
    assert (tmp_path / "runs").read_text(encoding="utf-8") == "my notes\n"


def test_a_folder_of_earlier_runs_is_refused_unless_overwrite(tmp_path: Path) -> None:
    """The second replay wrote beside (and over) the first's, and `report` mixed them."""
    out = tmp_path / "runs"
    first = simulate("--records", "0:20", "--dispatcher", "fcfs", "--dispatcher", "easy",
                     "--out", str(out))
    assert first.returncode == 0, first.stderr
    assert sorted(p.name for p in out.iterdir()) == ["01-fcfs", "02-easy"]
    kept = (out / "02-easy" / "summary.json").read_text(encoding="utf-8")
    error = refused(simulate("--records", "0:30", "--dispatcher", "easy-sjf", "--out", str(out)))
    assert error == (f"--out {out} already holds 2 run folders of an earlier replay (01-fcfs, "
                     "02-easy): `report` would mix them with these; give a new folder, or "
                     "--overwrite to replace them")
    assert (out / "02-easy" / "summary.json").read_text(encoding="utf-8") == kept
    (out / "notes.txt").write_text("mine\n", encoding="utf-8")
    again = simulate("--records", "0:30", "--dispatcher", "easy-sjf", "--overwrite",
                     "--out", str(out))
    assert again.returncode == 0, again.stderr
    assert (f"hpcdispatch simulate: --overwrite: removed 2 run folders of an earlier replay "
            f"from {out}") in again.stderr
    assert sorted(p.name for p in out.iterdir()) == ["01-easy-sjf", "notes.txt"]


# -- Ctrl-C during a replay --------------------------------------------------------------------


@pytest.mark.parametrize("path", ["grpc-stream", "in-process"])
def test_ctrl_c_during_a_pcp20_replay_stops_cleanly_leaving_a_run_that_says_it_is_incomplete(
        tmp_path: Path, path: str) -> None:
    """It aborted once in three in C++ (std::bad_function_call: CP-SAT's own SIGINT handler)
    and left a run folder `report` could not explain."""
    import json
    import signal

    out = tmp_path / "runs"
    command = [*CLI, "simulate", "--dispatcher", "pcp20", "--no-progress", "--out", str(out),
               *(["--in-process"] if path == "in-process" else [])]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    decisions = out / "01-pcp20" / "decisions.csv"
    try:
        # After the first decisions: their rows are on disk (written as they are made).
        while process.poll() is None and (
                not decisions.exists() or decisions.read_text(encoding="utf-8").count("\n") < 2):
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=0.2)
        assert process.poll() is None, "the replay ended before it could be interrupted"
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 130, stderr
    for crash in ("Traceback", "Fatal Python error", "bad_function_call", "terminate called"):
        assert crash not in stderr, stderr
    assert stdout == ""
    assert stderr.splitlines()[-1].startswith("hpcdispatch simulate: interrupted at t=")
    assert stderr.splitlines()[-1].endswith(f"; {out / '01-pcp20'} is incomplete: its "
                                            "incomplete.json says so and `report` leaves it out")
    run_dir = out / "01-pcp20"
    assert not (run_dir / "summary.json").exists()
    marker = json.loads((run_dir / "incomplete.json").read_text(encoding="utf-8"))
    assert marker["decisions"] >= 1 and marker["jobs_expected"] == 3000
    assert marker["label"] == "pcp20-book-data-driven"
    # Every decision it made is in decisions.csv: none was torn down half-way.
    rows = (run_dir / "decisions.csv").read_text(encoding="utf-8").splitlines()
    assert len(rows) == marker["decisions"] + 1
    error = refused(run("report", "--no-plots", str(out)), "report")
    assert error == (f"left out {run_dir}: an incomplete run, {marker['reason']}; replay it "
                     "again to report it")
    assert marker["reason"].startswith("interrupted (Ctrl-C) at simulated time t=")


# -- queue_length.png ----------------------------------------------------------------------------


def test_the_queue_plot_draws_the_queue_each_decision_leaves(tmp_path: Path) -> None:
    """It drew the queue each decision was asked about, held to the next: never below 1 (the
    job that arrived), however light the load."""
    import csv
    import json

    from hpcdispatch.sim_adapter.report_plots import binned_queue
    from hpcdispatch.sim_adapter.report_run import Run

    out = tmp_path / "runs"
    done = simulate("--records", "0:60", "--dispatcher", "easy", "--out", str(out))
    assert done.returncode == 0, done.stderr
    report = run("report", str(out))
    assert report.returncode == 0, report.stderr
    assert (out / "report" / "queue_length.png").stat().st_size > 0
    run_dir = out / "01-easy"
    with (run_dir / "decisions.csv").open(newline="", encoding="utf-8") as rows:
        asked = [(float(r["time"]), int(r["queue_length"]), int(r["started"]))
                 for r in csv.DictReader(rows)]
    assert min(q for _, q, _ in asked) >= 1  # a decision is asked about a queue
    times, queue, _ = Run(run_dir, json.loads((run_dir / "summary.json").read_text())).decisions()
    assert times == [t for t, _, _ in asked]
    assert queue == [q - started for _, q, started in asked]
    assert min(queue) == 0  # light load: decisions that start every queued job
    _, mean, low, _ = binned_queue(times, queue, 3600)
    assert low.min() == 0 and mean.min() < 1


# -- dispatch --promise-after ------------------------------------------------------------------


def test_dispatch_sets_the_promise_books_knob(capsys: pytest.CaptureFixture[str]) -> None:
    """dispatch could not set promise_after_s: `simulate --search` and `slurm-bridge
    --promise-after` could. At 0 (the ladder's arrival rung) every waiting job holds a promise;
    at the profile's 24 h some hold an estimate."""
    import json

    from hpcdispatch import cli

    def kinds(*flags: str) -> dict[str, int]:
        assert cli.main(["dispatch", "--profile", "book", *flags]) == 0
        out, _ = capsys.readouterr()
        expected = json.loads(out)["report"]["expected_starts"]
        promised = sum(1 for e in expected if e.get("promised"))
        return {"promised": promised, "estimate": len(expected) - promised}

    profile = kinds()
    assert profile["estimate"] > 0
    arrival = kinds("--promise-after", "0")
    assert arrival["estimate"] == 0 and arrival["promised"] > 0
    assert cli.main(["dispatch", "--profile", "book", "--promise-after", "-2"]) == 1
    assert ("  search.promise_after_s: must be >= -1 (-1: no promises)"
            in capsys.readouterr().err.splitlines())
    assert cli.main(["dispatch", "--promise-after", str(2**31)]) == 2
    assert capsys.readouterr().err == (
        f"hpcdispatch dispatch: --promise-after {2**31}: beyond the largest value, "
        "2,147,483,647 s (the ladder's head rung)\n")


# -- dispatch: a job that can never fit --------------------------------------------------------


@pytest.mark.parametrize("flags", [[], ["--profile", "book"], ["--dispatcher", "easy"]])
def test_a_job_that_can_never_fit_gets_a_line_saying_why(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str]) -> None:
    """It was left out of the start table with no note."""
    import json
    from importlib import resources

    from hpcdispatch import cli

    snapshot = json.loads(resources.files("hpcdispatch.examples").joinpath(
        "eurora_snapshot.json").read_text(encoding="utf-8"))  # 64 nodes of 16 cores, 2 GPUs/MICs
    first = snapshot["queued_jobs"][0]
    snapshot["queued_jobs"] += [
        {**first, "id": "wide", "units": 500, "unit_request": {"core": 8, "mem": 2048}},
        {**first, "id": "gpu-hog", "units": 1, "unit_request": {"core": 1, "gpu": 5}},
    ]
    (tmp_path / "snapshot.json").write_text(json.dumps(snapshot), encoding="utf-8")
    assert cli.main(["dispatch", str(tmp_path / "snapshot.json"), *flags,
                     "--output", str(tmp_path / "decision.json")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[-2:] == [
        "never fits, so not in the table: wide asks 500 units of core=8, mem=2048; the up "
        "nodes, all idle, hold at most 128 such units",
        "never fits, so not in the table: gpu-hog asks 5 gpu per unit (core=1, gpu=5); no up "
        "node has more than 2",
    ]
    answer = json.loads((tmp_path / "decision.json").read_text(encoding="utf-8"))
    assert not {"wide", "gpu-hog"} & {s["job_id"] for s in answer.get("starts", [])}
