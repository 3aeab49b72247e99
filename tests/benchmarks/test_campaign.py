"""Campaigns (benchmarks/matrix/campaign.py): the matrix, the YAML file, and a real local Dask
cluster.

The cluster test runs a tiny campaign (bundled slice, 150 jobs, EASY + FCFS, two predictors,
plus a trace that does not exist) through `--scheduler`, and checks what was gathered against
each run's own summary.json and CSV files.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.matrix.campaign import UsageError, main, matrix, parse_args
from benchmarks.matrix.cells import simulate_command
from benchmarks.matrix.report import system_label
from hpcdispatch.sim_adapter.replay import bundled_trace

LIMIT = 150


def test_matrix_always_has_easy_and_profiles_only_for_cp_dispatchers() -> None:
    args = parse_args(["--dispatchers", "pcp20,fcfs", "--profiles", "fast,papers",
                       "--predictors", "walltime,last-two", "--systems", "header,64x4"])
    cells = matrix(args)
    combos = [(c["system"], c["predictor"], c["dispatcher"], c["profile"]) for c in cells]
    per_group = [("easy", ""), ("pcp20", "fast"), ("pcp20", "papers"), ("fcfs", "")]
    assert combos == [(s, p, d, f) for s in (None, "64x4") for p in ("walltime", "last-two")
                      for d, f in per_group]
    assert len({c["name"] for c in cells}) == len(cells)
    with pytest.raises(UsageError):
        matrix(parse_args(["--dispatchers", "nope"]))


def test_a_trace_on_a_preset_carries_its_workload_knobs_to_every_cell(tmp_path: Path) -> None:
    config = tmp_path / "eurora.yaml"
    config.write_text("systems: [eurora]\nproc_scale: 4\naccelerator_share: 0.3\n")
    cells = matrix(parse_args(["--config", str(config), "--dispatchers", "pcp20"]))
    assert [(c["system"], c["proc_scale"], c["accelerator_share"]) for c in cells] == [
        ("eurora", 4.0, 0.3)] * 2
    command = simulate_command(cells[1], Path("t.swf"), Path("out"))
    assert command[command.index("--proc-scale") + 1] == "4.0"
    assert command[command.index("--accelerator-share") + 1] == "0.3"
    assert command[command.index("--system") + 1] == "eurora"
    summary = {"system": {"name": "eurora"},
               "unit_rule": {"proc_scale": 4.0, "accelerator_share": 0.3,
                             "accelerators": ["gpu", "mic"]}}
    assert system_label(summary) == "eurora (4 cores/proc, 30% ask gpu/mic)"
    assert system_label({"system": {"name": "100x1"}, "unit_rule": {"proc_scale": 1.0}}) == "100x1"
    for bad in (["--proc-scale", "0"], ["--accelerator-share", "1.5"]):
        with pytest.raises(UsageError, match="proc-scale"):
            matrix(parse_args(bad))
    config.write_text("proc_scale: [4]\n")  # a YAML list: argparse types only strings
    with pytest.raises(UsageError, match="take numbers"):
        matrix(parse_args(["--config", str(config)]))


def test_config_file_gives_defaults_and_flags_win(tmp_path: Path) -> None:
    config = tmp_path / "campaign.yaml"
    config.write_text("dispatchers: [hcp19, pcp20]\npredictors: last-two\nlimit_jobs: 10\n"
                      "out: somewhere\n")
    args = parse_args(["--config", str(config), "--limit-jobs", "20"])
    assert (args.dispatchers, args.predictors, args.limit_jobs) == ("hcp19,pcp20", "last-two", 20)
    assert args.out == Path("somewhere")
    config.write_text("dispatcher: easy\n")  # a typo is an error, not silently ignored
    with pytest.raises(UsageError, match="dispatcher"):
        parse_args(["--config", str(config)])


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, set[str]]]:
    """A real local Dask cluster: its address and its workers' addresses."""
    import dask
    from distributed import Client, LocalCluster

    scratch = str(tmp_path_factory.mktemp("dask"))  # not dask-scratch-space in the temp folder
    with (dask.config.set({"temporary-directory": scratch}),
          LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                       dashboard_address=None, local_directory=scratch) as cluster,
          Client(cluster) as client):
        client.wait_for_workers(2, timeout=60)
        yield cluster.scheduler_address, set(client.scheduler_info()["workers"])


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _markdown_rows(text: str) -> list[dict[str, str]]:
    """The rows of the first table (the per-cell one; the matrix view follows it)."""
    all_lines = text.splitlines()
    first = next(i for i, line in enumerate(all_lines) if line.startswith("| "))
    lines = list(itertools.takewhile(lambda line: line.startswith("|"), all_lines[first:]))
    lines = [line for line in lines if line.startswith("| ")]
    header = [h.strip() for h in lines[0].strip("|").split("|")]
    return [dict(zip(header, (v.strip() for v in line.strip("|").split("|")), strict=True))
            for line in lines[1:]]


def test_campaign_on_a_local_dask_cluster(scheduler: tuple[str, set[str]],
                                          tmp_path: Path) -> None:
    address, workers = scheduler
    out = tmp_path / "campaign"
    trace = bundled_trace()  # a path, so the client ships its content to the workers
    missing = tmp_path / "no-such-trace.swf"
    code = main(["--traces", f"{trace},{missing}", "--dispatchers", "easy,fcfs",
                 "--predictors", "walltime,last-two", "--limit-jobs", str(LIMIT),
                 "--scheduler", address, "--out", str(out), "--no-progress"])
    assert code == 1  # a failed cell shows in the exit code

    document = json.loads((out / "campaign.json").read_text())
    entries = {e["cell"]: e for e in document["cells"]}
    assert len(entries) == 2 * 2 * 2
    assert document["campaign"]["cells"] == {"ok": 4, "failed": 4, "pending": 0}

    ok = {name: e for name, e in entries.items() if e["status"] == "ok"}
    assert {e["spec"]["trace"] for e in ok.values()} == {str(trace)}
    runs: dict[str, dict[str, Any]] = {}
    for name, entry in ok.items():
        run_dir = out / name
        summary = json.loads((run_dir / "summary.json").read_text())
        runs[name] = summary
        assert entry["summary"] == summary  # gathered as the run wrote it
        assert entry["worker"] in workers  # ran on the cluster, not in this process
        assert summary["jobs"] == LIMIT == len(_rows(run_dir / "jobs.csv"))
        assert summary["decisions"] == len(_rows(run_dir / "decisions.csv")) > 0
        assert (summary["dispatcher"], summary["predictor"]) == (
            entry["spec"]["dispatcher"], entry["spec"]["predictor"])

    # Ratios recomputed from the runs' own files: EASY of the same predictor is the reference.
    easy = {s["predictor"]: s for s in runs.values() if s["dispatcher"] == "easy"}
    assert set(easy) == {"walltime", "last-two"}
    table = {(r["dispatcher"], r["predictor"]): r
             for r in _markdown_rows((out / "campaign.md").read_text())}
    assert len(table) == len(ok)
    for name, summary in runs.items():
        ref = easy[summary["predictor"]]
        bsld = summary["bounded_slowdown"]["mean"] / ref["bounded_slowdown"]["mean"]
        decision = summary["decision_seconds"]["mean"] / ref["decision_seconds"]["mean"]
        ratios = ok[name]["ratios_to_easy"]
        assert math.isclose(ratios["bounded_slowdown"], bsld)
        assert math.isclose(ratios["decision_seconds"], decision)
        if summary["dispatcher"] == "easy":
            assert ratios["bounded_slowdown"] == ratios["decision_seconds"] == 1.0
        row = table[(summary["dispatcher"], summary["predictor"])]
        assert row["jobs"] == str(summary["jobs"])
        assert row["bsld mean ± std"] == (f"{summary['bounded_slowdown']['mean']:,.2f} ± "
                                          f"{summary['bounded_slowdown']['std']:,.2f}")
        assert row["util"] == f"{summary['utilisation']:,.3f}"
        assert row["decision p99 [ms]"] == f"{summary['decision_seconds']['p99'] * 1000:,.2f}"
        assert row["bsld / EASY"] == f"{bsld:,.2f}"
        assert row["decision / EASY"].split()[0] == f"{decision:,.2f}"

    # The missing trace fails on the workers, cell by cell, without stopping the others.
    failed = {name: e for name, e in entries.items() if e["status"] == "failed"}
    assert {e["spec"]["trace"] for e in failed.values()} == {str(missing)}
    markdown = (out / "campaign.md").read_text()
    for name, entry in failed.items():
        assert entry["error"].startswith("FileNotFoundError")
        assert entry["summary"] is None and entry["ratios_to_easy"]["bounded_slowdown"] is None
        assert "FileNotFoundError" in (out / name / "error.txt").read_text()
        assert f"`{name}`: failed" in markdown


def test_cells_replay_in_process_unless_asked_for_grpc_or_given_a_target() -> None:
    def command(*flags: str) -> list[str]:
        (cell,) = matrix(parse_args(["--dispatchers", "easy", "--predictors", "walltime",
                                     *flags]))
        return simulate_command(cell, Path("t.swf"), Path("out"))

    assert "--in-process" in command()
    assert "--in-process" not in command("--grpc")
    with_target = command("--target", "127.0.0.1:50051")
    assert "--in-process" not in with_target
    assert with_target[with_target.index("--target") + 1] == "127.0.0.1:50051"


def test_resume_runs_only_the_cells_not_yet_ok_with_the_same_settings(
        scheduler: tuple[str, set[str]], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    address, _ = scheduler
    out = tmp_path / "campaign"
    where = ["--scheduler", address, "--out", str(out), "--no-progress"]
    common = ["--traces", "bundled", "--predictors", "walltime", "--limit-jobs", "60", *where]
    assert main([*common, "--dispatchers", "easy"]) == 0
    (easy_cell,) = [p for p in out.iterdir() if p.name.endswith("__easy")]
    stamp = (easy_cell / "summary.json").stat().st_mtime_ns
    capsys.readouterr()
    # one more dispatcher: only its cell runs, EASY's stays as it was and is in the table
    assert main([*common, "--dispatchers", "easy,fcfs", "--resume"]) == 0
    err = capsys.readouterr().err
    assert "campaign: 1 cells (1 kept from the last run)" in err
    assert "__fcfs: 60 jobs" in err and "__easy: " not in err
    assert (easy_cell / "summary.json").stat().st_mtime_ns == stamp
    document = json.loads((out / "campaign.json").read_text())
    assert document["campaign"]["cells"] == {"ok": 2, "failed": 0, "pending": 0}
    assert document["campaign"]["kept"] == [easy_cell.name]
    assert {r["dispatcher"] for r in _markdown_rows((out / "campaign.md").read_text())} == {
        "easy", "fcfs"}
    # other settings (fewer jobs) are other cells: nothing is kept
    assert main(["--traces", "bundled", "--predictors", "walltime", "--limit-jobs", "50",
                 *where, "--dispatchers", "easy", "--resume"]) == 0
    assert "campaign: 1 cells on" in capsys.readouterr().err
