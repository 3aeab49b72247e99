"""The in-process replay path gives the gRPC paths' decisions, byte for byte, under every
dispatcher (deterministic search): the real service on loopback, through a session stream (the
default, `grpc-stream`) and through the session's unary calls (`--unary-sessions`), against its
pipeline called in this process (`simulate --in-process`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from hpcdispatch.catalog import DISPATCHER_NAMES
from hpcdispatch.sim_adapter.adapter import DispatchSettings, service_target
from hpcdispatch.sim_adapter.backend import ChangeLog
from hpcdispatch.sim_adapter.cli import register
from hpcdispatch.sim_adapter.in_process_backend import LocalService
from hpcdispatch.sim_adapter.replay import RunSpec, bundled_trace, replay
from hpcdispatch.snapshot import QueuedJob, RunningJob, UnitAllocation

LIMIT = 300  # jobs of the bundled KTH-SP2 slice per replay: queues form, the CP models solve


@pytest.fixture(scope="module")
def target() -> Iterator[str]:
    with service_target(None) as address:
        yield address


@pytest.fixture(scope="module")
def local() -> LocalService:
    return LocalService()


PATHS = ("grpc-stream", "grpc-session", "in-process")


def _all_paths(target: str, local: LocalService, tmp_path: Path, spec: RunSpec) -> dict[
        str, dict]:
    """The replay of `spec` on each path (PATHS), by path; asserts their jobs.csv identical."""
    summaries = {
        "grpc-stream": replay(spec, target, tmp_path / "grpc-stream"),
        "grpc-session": replay(dataclasses.replace(spec, unary_sessions=True), target,
                               tmp_path / "grpc-session"),
        "in-process": replay(spec, local, tmp_path / "in-process"),
    }
    assert {path: summary["path"] for path, summary in summaries.items()} == {
        path: path for path in PATHS}
    jobs = {path: (tmp_path / path / "jobs.csv").read_bytes() for path in PATHS}
    assert jobs["grpc-stream"] == jobs["grpc-session"] == jobs["in-process"]
    return summaries


@pytest.mark.parametrize("dispatcher", sorted(DISPATCHER_NAMES))
def test_every_path_gives_the_same_jobs_csv(
    dispatcher: str, target: str, local: LocalService, tmp_path: Path
) -> None:
    spec = RunSpec(bundled_trace(), DispatchSettings(dispatcher=dispatcher,
                                                     predictor="walltime"), limit_jobs=LIMIT)
    summaries = _all_paths(target, local, tmp_path, spec)
    assert {s["jobs"] for s in summaries.values()} == {LIMIT}
    assert len({s["decisions"] for s in summaries.values()}) == 1
    assert (tmp_path / "grpc-stream" / "jobs.csv").read_bytes().count(b"\n") == LIMIT + 1


@pytest.mark.parametrize(("dispatcher", "predictor", "system", "unit_mode"), [
    ("pcp20", "data-driven", None, "node"),  # the predictors learn from completions
    ("easy", "last-two", None, "node"),
    ("easy-k", "last-two", None, "node"),  # the node profile's array chooser
    ("los", "oracle", None, "node"),  # EASY's head reservation, kept between decisions
    ("pcp20", "walltime", "eurora", "core"),  # several resource types, units per core
    ("conservative", "walltime", "eurora", "core"),
])
def test_every_path_agrees_with_learning_predictors_and_resource_types(
    dispatcher: str, predictor: str, system: str | None, unit_mode: str,
    target: str, local: LocalService, tmp_path: Path,
) -> None:
    spec = RunSpec(bundled_trace(), DispatchSettings(dispatcher=dispatcher, predictor=predictor),
                   system=system, unit_mode=unit_mode,  # type: ignore[arg-type]
                   accelerator_share=0.2 if system else 0.0, limit_jobs=LIMIT)
    _all_paths(target, local, tmp_path, spec)


def test_the_cli_runs_in_process_and_refuses_a_target_with_it(tmp_path: Path) -> None:
    import argparse

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    out = tmp_path / "runs"
    args = parser.parse_args(["simulate", "--dispatcher", "easy", "--predictor", "walltime",
                              "--limit-jobs", "50", "--in-process", "--no-progress",
                              "--out", str(out)])
    assert args.func(args) == 0
    (run,) = out.iterdir()
    assert '"path": "in-process"' in (run / "summary.json").read_text()
    for other in (["--target", "127.0.0.1:1"], ["--unary-sessions"], ["--full-snapshots"]):
        args = parser.parse_args(["simulate", "--in-process", *other,
                                  "--out", str(tmp_path / "no")])
        assert args.func(args) == 2


def test_a_job_that_starts_and_ends_between_two_calls_leaves_the_queue() -> None:
    changes = ChangeLog()
    queued = QueuedJob("a", "u", "n", "q", 0, 1, {"core": 1}, 10)
    changes.submit(queued)
    first = changes.take(0)
    assert [j.id for j in first.submitted] == ["a"] and not first.started
    changes.start(RunningJob("a", "u", "n", 0, 10, 1, (UnitAllocation("n1", {"core": 1}),)))
    changes.end("a")  # before the next call
    second = changes.take(1)
    assert second.cancelled == ("a",) and not second.ended and not second.started


def test_an_invalid_opening_snapshot_is_refused_naming_the_field() -> None:
    from hpcdispatch.server.in_process import InProcessService, InvalidSnapshot
    from hpcdispatch.v1 import dispatcher_pb2 as pb

    request = pb.DispatchRequest(time=10, nodes=[pb.Node(id="n1", state=pb.NODE_STATE_UP,
                                                         capacity={"core": 4})],
                                 queued_jobs=[pb.QueuedJob(id="a", submit_time=0, units=1,
                                                           unit_request={"core": 1},
                                                           requested_time=0)])
    with pytest.raises(InvalidSnapshot, match=r"queued_jobs\[0\]\.requested_time"):
        InProcessService().open(request)


def test_every_path_agrees_under_easys_head_discipline(
    target: str, local: LocalService, tmp_path: Path
) -> None:
    # EASY's head discipline (`easy_head`, the switch of the profile `promises` that issue #49
    # retired) starts the oldest jobs outside the model: the session's state and the
    # in-process pipeline must see the same starts.
    spec = RunSpec(bundled_trace(), DispatchSettings(
        dispatcher="pcp20", predictor="walltime", profile="qos",
        search=(("easy_head", True), ("starvation_wait_s", 0))), limit_jobs=LIMIT)
    summaries = _all_paths(target, local, tmp_path, spec)
    assert {s["profile"] for s in summaries.values()} == {"qos"}
