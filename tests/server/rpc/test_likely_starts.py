"""A promise with its likely start beside it, and why it moved later (issue #49, item 2), over
real gRPC on loopback: the outcome's likely starts and move reasons reach
`ExpectedStart.likely_start` / `move_reason`, the metrics count each move by its reason and
observe how far a promised job started from its likely start; a replay records the same
through gRPC and in process. The outcomes are a stand-in's (tests/likely_starts.py)."""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

import pytest

from hpcdispatch.client import DispatcherClient
from hpcdispatch.server.dispatchers import DISPATCHERS
from hpcdispatch.server.dispatchers.base import Outcome, SearchControl
from hpcdispatch.server.dispatchers.planning.problem import Problem
from hpcdispatch.server.rpc.app import RunningServer
from hpcdispatch.sim_adapter.adapter import DispatchSettings
from hpcdispatch.sim_adapter.in_process_backend import LocalService
from hpcdispatch.sim_adapter.replay import RunSpec, bundled_trace, replay
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.likely_starts import NOT_SAID, RAN_PAST, PromisingWithLikelyStarts, likely_of
from tests.observability import value

T = 10_000


@pytest.fixture
def promising(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(DISPATCHERS, pb.DISPATCHER_CONSERVATIVE, PromisingWithLikelyStarts())


def request(t: int, with_r: bool = True) -> pb.DispatchRequest:
    """Two 4-core nodes, r on n0 until T + 1,000 (its requested time); j3 (both nodes), j7 and
    j5 waiting: conservative reserves each a start, none of them now while r runs."""
    message = pb.DispatchRequest(time=t, cluster="likely", dispatcher=pb.DISPATCHER_CONSERVATIVE,
                                 predictor=pb.PREDICTOR_WALLTIME)
    for node in ("n0", "n1"):
        message.nodes.add(id=node, state=pb.NODE_STATE_UP, capacity={"core": 4})
    if with_r:
        message.running_jobs.add(
            id="r", start_time=T - 100, requested_time=1_100, expected_duration=1_100,
            units=[pb.UnitAllocation(node_id="n0", amounts={"core": 4})])
    for job_id, submit, units, seconds in (("j3", T - 50, 2, 1_000), ("j7", T - 40, 1, 3_000),
                                           ("j5", T - 30, 2, 500)):
        message.queued_jobs.add(id=job_id, submit_time=submit, units=units,
                                unit_request={"core": 4}, requested_time=seconds)
    return message


def test_the_likely_start_and_the_move_reason_reach_the_answer(
    promising: None, serve: Callable[..., RunningServer],
) -> None:
    running = serve()
    with DispatcherClient(running.target, timeout=60) as client:
        answer = client.dispatch(request(T))
        assert not answer.starts
        shown = {e.job_id: e for e in answer.report.expected_starts}
        assert set(shown) == {"j3", "j7", "j5"} and all(e.promised for e in shown.values())
        for e in shown.values():
            assert e.HasField("likely_start")
            assert e.likely_start == T + likely_of(e.start_time - T) < e.start_time
        assert shown["j3"].start_time == T + 1_000  # r's requested end
        assert (shown["j3"].moved_later_seconds, shown["j3"].move_reason) == (
            RAN_PAST, pb.PROMISE_MOVE_REASON_RAN_PAST_LIMIT)
        assert (shown["j7"].moved_later_seconds, shown["j7"].move_reason) == (
            NOT_SAID, pb.PROMISE_MOVE_REASON_UNSPECIFIED)
        assert (shown["j5"].moved_later_seconds, shown["j5"].move_reason) == (
            0, pb.PROMISE_MOVE_REASON_UNSPECIFIED)
        # r ends at T + 1,000: j3 starts at its promise, 250 s after its likely start.
        ended = client.dispatch(request(T + 1_000, with_r=False))
        assert [s.job_id for s in ended.starts] == ["j3"]
    text = running.metrics.exposition().decode()
    moved = "hpcdispatch_promise_moved_later_seconds_count"
    # j3 moved at the first decision; j7 at both (it still waits at the second).
    assert value(text, moved, reason="ran_past_limit", dispatcher="conservative") == 1
    assert value(text, moved, reason="unspecified") == 2
    assert value(text, "hpcdispatch_promise_moved_later_seconds_sum",
                 reason="unspecified") == 2 * NOT_SAID
    assert value(text, "hpcdispatch_likely_start_error_seconds_count") == 1
    assert value(text, "hpcdispatch_likely_start_error_seconds_sum") == 1_000 - likely_of(1_000)
    assert value(text, "hpcdispatch_promised_starts_total", outcome="kept") == 1


def read_jobs(path: Path) -> list[dict[str, str]]:
    with (path / "jobs.csv").open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_a_replay_records_the_same_likely_starts_and_moves_through_grpc_and_in_process(
    promising: None, serve: Callable[..., RunningServer], tmp_path: Path,
) -> None:
    spec = RunSpec(bundled_trace(), DispatchSettings(dispatcher="conservative",
                                                     predictor="walltime"), limit_jobs=300)
    through_grpc = replay(spec, serve().target, tmp_path / "grpc")
    in_process = replay(spec, LocalService(), tmp_path / "in-process")
    assert (through_grpc["path"], in_process["path"]) == ("grpc-stream", "in-process")
    assert (tmp_path / "grpc" / "jobs.csv").read_bytes() == (
        tmp_path / "in-process" / "jobs.csv").read_bytes()
    assert through_grpc["promise_accuracy"] == in_process["promise_accuracy"]
    jobs = read_jobs(tmp_path / "in-process")
    promised = [r for r in jobs if r["first_promised_start"]]
    assert len(promised) >= 10, "too few waiting jobs to say anything"
    for row in promised:  # beside each promise its likely start, 3/4 of the way there
        assert int(row["submit"]) <= int(row["first_promised_likely_start"]) <= int(
            row["first_promised_start"])
    reasons = {reason for r in jobs for reason in r["promise_move_reasons"].split()}
    assert reasons == {"ran_past_limit", "unspecified"}
    for row in jobs:
        moves = row["promise_move_reasons"].split()
        assert int(row["promise_moves"]) == len(moves)
        assert int(row["promise_moved_later_seconds"]) == sum(
            RAN_PAST if m == "ran_past_limit" else NOT_SAID for m in moves)
    accuracy = in_process["promise_accuracy"]
    assert accuracy["likely"]["jobs"] == len(promised)
    assert accuracy["moved"]["by_reason"] == {
        "ran_past_limit": sum(r["promise_move_reasons"].count("ran_past_limit") for r in jobs),
        "unspecified": sum(r["promise_move_reasons"].count("unspecified") for r in jobs)}


class PlainNumbers(PromisingWithLikelyStarts):
    """A plugin's reasons as plain numbers: 2 (RAN_PAST_LIMIT's), and 99, which names none."""

    def decide(self, problem: Problem, control: SearchControl) -> Outcome:
        outcome = super().decide(problem, control)
        for i in outcome.promises_moved:
            number = 2 if problem.jobs[i].id == "j3" else 99
            outcome.promise_move_reasons[i] = number  # type: ignore[assignment]
        return outcome


def test_a_plugins_plain_number_reads_as_its_reason_and_one_naming_none_as_unspecified(
    monkeypatch: pytest.MonkeyPatch, serve: Callable[..., RunningServer],
) -> None:
    monkeypatch.setitem(DISPATCHERS, pb.DISPATCHER_CONSERVATIVE, PlainNumbers())
    with DispatcherClient(serve().target, timeout=60) as client:
        shown = {e.job_id: e for e in client.dispatch(request(T)).report.expected_starts}
    assert shown["j3"].move_reason == pb.PROMISE_MOVE_REASON_RAN_PAST_LIMIT
    assert (shown["j7"].moved_later_seconds, shown["j7"].move_reason) == (
        NOT_SAID, pb.PROMISE_MOVE_REASON_UNSPECIFIED)
