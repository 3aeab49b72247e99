"""benchmarks.qos.wait_chain: on hand-made job records whose chain is known, and on two real
replays of the bundled KTH-SP2 slice."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.qos.wait_chain import (
    last_to_end,
    load_jobs,
    longest_wait,
    main,
    makespan,
    wait_chain,
)
from hpcdispatch.cli import main as cli
from hpcdispatch.sim_adapter.records import JobRecord

HEADER = ("job_id,user,submit,start,end,wait,run,requested_time,predicted,killed,units,cores,"
          "nodes")


def _jobs(path: Path, rows: list[tuple[int, int, int, int, int, str]]) -> Path:
    """rows: (job_id, submit, start, end, predicted, nodes separated by spaces)."""
    lines = [HEADER] + [f"{i},u,{q},{s},{e},{s - q},{e - s},{p},{p},0,{len(n.split())},"
                        f"{len(n.split())},{n}" for i, q, s, e, p, n in rows]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def runs(tmp_path: Path) -> tuple[Path, Path]:
    # Two nodes. In the reference, L (n2, 100 s) starts at once, the two-node W when L ends,
    # and B (n2, submitted after L) after W. In the run, B goes ahead of L on n2, so L ends at
    # 140 and W, waiting for both nodes, starts 40 s later. X holds n1 until 60 in both.
    reference = _jobs(tmp_path / "reference.csv", [
        (1, 0, 0, 100, 100, "n2"), (2, 1, 100, 110, 10, "n1 n2"),
        (3, 10, 110, 140, 30, "n2"), (4, 0, 0, 60, 60, "n1")])
    run = _jobs(tmp_path / "run.csv", [
        (1, 0, 40, 140, 100, "n2"), (2, 1, 140, 150, 10, "n1 n2"),
        (3, 10, 10, 40, 30, "n2"), (4, 0, 0, 60, 60, "n1")])
    return reference, run


def test_the_chain_follows_the_delayed_occupants_to_the_job_that_went_ahead(
        runs: tuple[Path, Path]) -> None:
    reference, run = (load_jobs(p) for p in runs)
    assert longest_wait(run).id == "2"
    chain = wait_chain(reference, run)
    assert [(link.job.id, link.delay) for link in chain] == [("2", 40), ("1", 40)]
    # W's nodes were held last by L (it ended at 140, X at 60), L's by B, which started
    # 100 s earlier than in the reference: B went ahead of L, and the chain ends there.
    assert [link.occupant.id for link in chain if link.occupant] == ["1", "3"]
    assert chain[-1].occupant_delay == -100


def test_a_job_with_no_occupant_ends_the_chain(tmp_path: Path) -> None:
    reference = load_jobs(_jobs(tmp_path / "r.csv", [(1, 0, 0, 10, 10, "n1")]))
    run = load_jobs(_jobs(tmp_path / "s.csv", [(1, 0, 5, 15, 10, "n1")]))
    chain = wait_chain(reference, run)
    assert len(chain) == 1 and chain[0].occupant is None and chain[0].delay == 5


def test_the_command_prints_the_chain_and_names_a_bad_job(
        runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(runs[0]), str(runs[1])]) == 0
    out = capsys.readouterr().out
    assert "job 2 (2 nodes, waited 0.0 h) started +40 s" in out
    assert "held last by job 3 (1 node, submitted 10 s after it" in out
    with pytest.raises(SystemExit):
        main([str(runs[0]), str(runs[1]), "--job", "99"])
    assert "--job 99: no such job" in capsys.readouterr().err


def test_the_makespan_and_the_chain_from_the_last_job_to_end(
        runs: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    reference, run = (load_jobs(p) for p in runs)
    # The same work ends at 150 instead of 140: W ends last in the run, B in the reference.
    assert (makespan(run), makespan(reference)) == (150, 140)
    assert (last_to_end(run).id, last_to_end(reference).id) == ("2", "3")
    assert main([str(runs[0]), str(runs[1]), "--last-to-end", "--limit", "1"]) == 0
    out = capsys.readouterr().out
    assert "makespan: 150 s here, 140 s in the reference (+7.1%)" in out
    assert "1. job 2 " in out and "2. job" not in out
    assert "chain cut at --limit 1" in out  # L, W's last occupant, started later too
    with pytest.raises(SystemExit):
        main([str(runs[0]), str(runs[1]), "--limit", "0"])


def test_on_real_replays_every_link_is_the_last_occupant_of_a_delayed_job(
        tmp_path: Path) -> None:
    out = tmp_path / "replays"
    assert cli(["simulate", "--in-process", "--trace", "kth-sp2-slice", "--limit-jobs", "300",
                "--dispatcher", "easy", "--dispatcher", "easy-sjf", "--predictor", "walltime",
                "--out", str(out)]) == 0
    reference, run = load_jobs(out / "01-easy"), load_jobs(out / "02-easy-sjf")
    delayed = max(run.values(), key=lambda j: j.start - reference[j.id].start)
    assert delayed.start > reference[delayed.id].start  # SJF delays someone
    chain = wait_chain(reference, run, delayed.id)
    for k, link in enumerate(chain):
        assert link.delay > 0
        if link.occupant is None:
            continue
        occupant = link.occupant
        assert set(occupant.nodes) & set(link.job.nodes) and occupant.end <= link.job.start
        # no other job on those nodes ended later, before the delayed job started
        assert not any(set(o.nodes) & set(link.job.nodes) and occupant.end < o.end <= link.job.start
                       for o in run.values() if o.id != link.job.id)
        if k + 1 < len(chain):
            assert chain[k + 1].job == occupant and link.occupant_delay > 0
        else:
            assert link.occupant_delay <= 0
    assert isinstance(chain[0].job, JobRecord)
