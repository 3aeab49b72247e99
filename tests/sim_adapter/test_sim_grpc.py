"""Replays through gRPC on loopback: the real service, a lying fake service, and the CLI."""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from hpcdispatch.client import DispatcherClient
from hpcdispatch.sim_adapter.adapter import DispatchSettings, GrpcBackend
from hpcdispatch.sim_adapter.cli import register
from hpcdispatch.sim_adapter.outputs import RunRecorder
from hpcdispatch.sim_adapter.replay import RunSpec, bundled_trace, replay
from hpcdispatch.sim_adapter.simulator import InvalidDecisionError, Simulator
from hpcdispatch.sim_adapter.swf import CleaningStats, iter_jobs, read_header
from hpcdispatch.sim_adapter.workload import rule_for_system, system_from_header
from hpcdispatch.systems import PRESETS
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc
from tests.processes import quiet_embedded_service

LIMIT = 250  # jobs of the bundled slice per replay here


@pytest.fixture(scope="module")
def target() -> Iterator[str]:
    with quiet_embedded_service() as address:
        yield address


def read_jobs(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def run(target: str, out: Path, dispatcher: str, predictor: str = "walltime",
        limit: int = LIMIT) -> dict:
    spec = RunSpec(bundled_trace(), DispatchSettings(dispatcher=dispatcher, predictor=predictor),
                   limit_jobs=limit)
    return replay(spec, target, out)


def test_easy_replay_is_reproducible_and_summary_matches_jobs(target: str,
                                                              tmp_path: Path) -> None:
    first = run(target, tmp_path / "a", "easy")
    second = run(target, tmp_path / "b", "easy")
    jobs_a, jobs_b = read_jobs(tmp_path / "a" / "jobs.csv"), read_jobs(tmp_path / "b" /
                                                                          "jobs.csv")
    assert len(jobs_a) == first["jobs"] == LIMIT
    key = [(r["job_id"], r["start"], r["end"], r["nodes"]) for r in jobs_a]
    assert key == [(r["job_id"], r["start"], r["end"], r["nodes"]) for r in jobs_b]
    assert first["decisions"] == second["decisions"]
    waits = [int(r["wait"]) for r in jobs_a]
    assert first["wait_seconds"]["mean"] == pytest.approx(statistics.fmean(waits))
    assert first["wait_seconds"]["std"] == pytest.approx(statistics.pstdev(waits))
    bsld = [float(r["bounded_slowdown"]) for r in jobs_a]
    assert first["bounded_slowdown"]["mean"] == pytest.approx(statistics.fmean(bsld), rel=1e-5)
    assert all(int(r["start"]) >= int(r["submit"]) for r in jobs_a)
    assert first["dispatcher"] == "easy" and first["predictor"] == "walltime"
    # Walltime never under-estimates: a job is killed at its requested time.
    assert first["predictor_accuracy"]["underestimation_rate"] == 0.0
    decisions = read_jobs(tmp_path / "a" / "decisions.csv")
    assert len(decisions) == first["decisions"]
    assert all(int(d["queue_length"]) > 0 for d in decisions)
    assert {d["dispatcher"] for d in decisions} == {"easy"}
    saved = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert saved["jobs"] == LIMIT and saved["cleaning"]["kept"] == LIMIT


def test_oracle_predictions_are_exact(target: str, tmp_path: Path) -> None:
    summary = run(target, tmp_path / "o", "easy", predictor="oracle", limit=120)
    accuracy = summary["predictor_accuracy"]
    assert accuracy["jobs"] == 120
    assert accuracy["mae_seconds"] == 0 and accuracy["exact_rate"] == 1.0


def test_completions_reach_the_service_predictors(target: str, tmp_path: Path) -> None:
    with DispatcherClient(target) as client:
        if pb.PREDICTOR_LAST_TWO not in client.describe().predictors:
            pytest.skip("the server offers no last-two predictor")
    run(target, tmp_path / "l", "easy", predictor="last-two", limit=150)
    rows = read_jobs(tmp_path / "l" / "jobs.csv")
    learned = [r for r in rows if int(r["predicted"]) < int(r["requested_time"])]
    # Only a user's history can bring a prediction below the requested time.
    assert learned, "no prediction used a completed job's run time"


def test_default_dispatcher_is_left_to_the_server(target: str, tmp_path: Path) -> None:
    summary = run(target, tmp_path / "d", "default", limit=100)
    with DispatcherClient(target) as client:
        default = client.describe().default_dispatcher
    assert summary["dispatcher_requested"] == "default"
    assert summary["dispatcher"] == pb.Dispatcher.Name(default).removeprefix(
        "DISPATCHER_").lower()
    assert summary["jobs"] == 100


class OverAllocating(pb_grpc.DispatcherServiceServicer):
    """A broken service: puts every unit of the first queued job on the first node."""

    def Dispatch(self, request: pb.DispatchRequest,
                 context: grpc.ServicerContext) -> pb.DispatchResponse:
        response = pb.DispatchResponse(time=request.time)
        q = request.queued_jobs[0]
        response.starts.add(
            job_id=q.id, expected_duration=q.requested_time,
            units=[pb.UnitPlacement(node_id=request.nodes[0].id, amounts=dict(q.unit_request))
                   for _ in range(q.units)],
        )
        return response

    def ReportCompletions(self, request: pb.ReportCompletionsRequest,
                          context: grpc.ServicerContext) -> pb.ReportCompletionsResponse:
        return pb.ReportCompletionsResponse(accepted=len(request.completions))


def test_invalid_decision_from_a_grpc_service_stops_the_replay() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_DispatcherServiceServicer_to_server(OverAllocating(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        trace = bundled_trace()
        system = system_from_header(read_header(trace))
        recorder = RunRecorder(None)
        with DispatcherClient(f"127.0.0.1:{port}", timeout=120) as client:
            simulator = Simulator(system, rule_for_system(system), GrpcBackend(client),
                                  recorder)
            with pytest.raises(InvalidDecisionError, match="over capacity on 'core'"):
                simulator.run(iter_jobs(trace, CleaningStats(), limit=50))
    finally:
        server.stop(0)


def cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="hpcdispatch")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


def test_cli_simulate_then_report(target: str, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "runs"
    assert cli("simulate", "--target", target, "--limit-jobs", "120", "--dispatcher", "easy",
               "--dispatcher", "fcfs", "--predictor", "walltime", "--out", str(out),
               "--no-progress") == 0
    table = capsys.readouterr().out
    assert "easy-walltime" in table and "fcfs-walltime" in table
    assert sorted(p.name for p in out.iterdir()) == ["01-easy", "02-fcfs"]
    assert cli("report", str(out)) == 0
    printed = capsys.readouterr().out
    assert "mean bsld" in printed
    pngs = sorted(p.name for p in (out / "report").iterdir())
    # promises.png: EASY's decisions reported its head's promised start
    assert pngs == ["decision_time.png", "promises.png", "queue_length.png",
                    "slowdown_wait.png"]
    assert all((out / "report" / p).stat().st_size > 5000 for p in pngs)


def test_cli_reports_a_malformed_trace(target: str, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.swf"
    bad.write_text("; MaxNodes: 4\n1 0 -1 10 1\n")
    assert cli("simulate", "--trace", str(bad), "--target", target, "--no-progress",
               "--out", str(tmp_path / "runs")) == 2
    assert f"{bad}:2: expected 18" in capsys.readouterr().err


def test_cli_replays_a_trace_on_the_eurora_preset_with_accelerator_jobs(
        target: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The bundled KTH slice on Eurora: 4 cores per processor, 30 % of the small jobs ask for
    GPUs or MICs, and every such job ran on nodes that have them."""
    out = tmp_path / "runs"
    assert cli("simulate", "--target", target, "--limit-jobs", "200", "--system", "eurora",
               "--proc-scale", "4", "--accelerator-share", "0.3", "--dispatcher", "easy",
               "--predictor", "walltime", "--out", str(out), "--no-progress") == 0
    summary = json.loads((out / "01-easy" / "summary.json").read_text())
    assert summary["system"] == {"name": "eurora", "nodes": 64, "cores": 1024}
    assert summary["unit_rule"]["proc_scale"] == 4.0
    assert summary["unit_rule"]["accelerators"] == ["gpu", "mic"]
    rule = rule_for_system(PRESETS["eurora"], proc_scale=4, accelerator_share=0.3)
    kinds: dict[str | None, int] = {}
    for row in read_jobs(out / "01-easy" / "jobs.csv"):
        accelerator = rule.accelerator_for(row["job_id"], int(row["units"]))
        kind = accelerator[0] if accelerator else None
        kinds[kind] = kinds.get(kind, 0) + 1
        nodes = row["nodes"].split()
        assert int(row["cores"]) >= 4  # a trace processor is 4 cores
        if kind is not None:  # GPU jobs on the gpu half only, MIC jobs on the mic half only
            assert all(n.startswith(kind) for n in nodes), row
    assert kinds.get("gpu", 0) > 10 and kinds.get("mic", 0) > 10 and kinds[None] > 100
    assert summary["jobs"] == 200
    with pytest.raises(SystemExit):  # argparse: a share that is not a number
        cli("simulate", "--accelerator-share", "lots")
    assert cli("simulate", "--target", target, "--limit-jobs", "5", "--accelerator-share",
               "0.3", "--out", str(tmp_path / "bad"), "--no-progress") == 2
    assert "needs a system with accelerators" in capsys.readouterr().err
