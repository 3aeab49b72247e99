"""The replay loop against in-process fake dispatchers (the wire messages, no network)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import pytest

from hpcdispatch.proto_convert import completion_to_pb, snapshot_to_pb
from hpcdispatch.sim_adapter.adapter import answer_of
from hpcdispatch.sim_adapter.backend import Answer, StateChange
from hpcdispatch.sim_adapter.outputs import RunRecorder
from hpcdispatch.sim_adapter.records import DecisionRecord, JobRecord
from hpcdispatch.sim_adapter.simulator import (
    NEVER_FITS,
    InvalidDecisionError,
    ReplayOptions,
    SimulationError,
    Simulator,
)
from hpcdispatch.sim_adapter.swf import TraceJob
from hpcdispatch.sim_adapter.workload import UnitRule
from hpcdispatch.snapshot import JobCompletion, Snapshot
from hpcdispatch.systems import homogeneous
from hpcdispatch.v1 import dispatcher_pb2 as pb


def job(jid: str, submit: int, width: int, run: int, req: int, user: str = "u1") -> TraceJob:
    return TraceJob(id=jid, submit=submit, run_time=run, width=width, requested_time=req,
                    user=user, group="", executable="", queue="", partition="",
                    requested_memory_kb=-1, line=0)


def fcfs_first_fit(request: pb.DispatchRequest) -> pb.DispatchResponse:
    """A tiny FCFS / first-fit written for the tests, independent of the server's."""
    free = {n.id: dict(n.capacity) for n in request.nodes}
    for r in request.running_jobs:
        for u in r.units:
            for k, v in u.amounts.items():
                free[u.node_id][k] -= v
    response = pb.DispatchResponse(time=request.time)
    response.report.dispatcher = pb.DISPATCHER_FCFS
    response.report.status = pb.SOLVE_STATUS_HEURISTIC
    for q in request.queued_jobs:
        trial = {n: dict(f) for n, f in free.items()}
        placed: list[str] = []
        for node_id, have in trial.items():
            while len(placed) < q.units and all(have.get(k, 0) >= v
                                                for k, v in q.unit_request.items()):
                for k, v in q.unit_request.items():
                    have[k] -= v
                placed.append(node_id)
        if len(placed) < q.units:
            break
        free = trial
        response.starts.add(
            job_id=q.id, expected_duration=q.requested_time,
            units=[pb.UnitPlacement(node_id=n, amounts=dict(q.unit_request)) for n in placed],
        )
    return response


@dataclass
class FakeBackend:
    """A DispatchBackend deciding on the wire messages, as a service would see them."""

    policy: Callable[[pb.DispatchRequest], pb.DispatchResponse] = fcfs_first_fit
    log: list[tuple[str, object]] = field(default_factory=list)

    def decide(self, change: StateChange, whole: Callable[[], Snapshot]) -> Answer:
        snapshot = whole()
        request = snapshot_to_pb(snapshot)
        self.log.append(("dispatch", request))
        return answer_of(self.policy(request), snapshot)

    def report_completions(self, completions: Sequence[JobCompletion]) -> None:
        self.log.append(("completions", [completion_to_pb(c) for c in completions]))

    @property
    def requests(self) -> list[pb.DispatchRequest]:
        return [r for k, r in self.log if k == "dispatch" and isinstance(r, pb.DispatchRequest)]


@dataclass
class Collect:
    jobs: dict[str, JobRecord] = field(default_factory=dict)
    decisions: list[DecisionRecord] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)

    def job_finished(self, record: JobRecord) -> None:
        self.jobs[record.id] = record

    def decision_made(self, record: DecisionRecord) -> None:
        self.decisions.append(record)

    def job_dropped(self, reason: str) -> None:
        self.dropped.append(reason)


def simulate(
    jobs: list[TraceJob], backend: FakeBackend, nodes: int = 1, cores: int = 4,
    options: ReplayOptions | None = None, clock: Callable[[], float] | None = None,
) -> Collect:
    system = homogeneous("test", nodes, {"core": cores})
    out = Collect()
    kwargs = {"clock": clock} if clock else {}
    sim = Simulator(system, UnitRule(cores_per_node=cores), backend, out,
                    options, **kwargs)
    result = sim.run(jobs)
    assert result.jobs == len(out.jobs)
    return out


def test_release_before_admit_kill_at_requested_time_and_order_of_calls() -> None:
    backend = FakeBackend()
    out = simulate(
        [job("A", 0, 4, run=100, req=50), job("B", 50, 4, run=10, req=20),
         job("C", 55, 2, run=5, req=5)],
        backend,
    )
    a, b, c = out.jobs["A"], out.jobs["B"], out.jobs["C"]
    assert (a.start, a.end, a.killed) == (0, 50, True)  # killed at its requested time
    assert (b.start, b.end) == (50, 60)  # A released before B is admitted at t=50
    assert (c.start, c.end) == (60, 65)  # queued behind B
    assert c.wait == 5 and c.bounded_slowdown == pytest.approx(max((5 + 5) / 10, 1))
    # A completion is reported before the next Dispatch and the job is gone from it.
    kinds = [k for k, _ in backend.log]
    assert kinds == ["dispatch", "completions", "dispatch", "dispatch", "completions",
                     "dispatch", "completions"]
    second = backend.log[2][1]
    assert isinstance(second, pb.DispatchRequest)
    assert second.time == 50 and [r.id for r in second.running_jobs] == []
    # The dispatcher is never asked with an empty queue.
    assert all(len(r.queued_jobs) > 0 for r in backend.requests)
    first_batch = backend.log[1][1]
    assert isinstance(first_batch, list)
    assert (first_batch[0].job_id, first_batch[0].start_time, first_batch[0].end_time) == (
        "A", 0, 50)


def test_running_jobs_carry_their_predicted_duration() -> None:
    backend = FakeBackend()
    simulate([job("A", 0, 2, run=30, req=100), job("B", 10, 4, run=5, req=5)], backend)
    at_10 = backend.requests[1]
    running = at_10.running_jobs[0]
    assert running.id == "A" and running.expected_duration == 100
    assert running.start_time == 0 and len(running.units) == 1


def test_zero_length_job_holds_its_node_for_one_second() -> None:
    # One decision per time point: a zero-second job started at t ends at t + 1 (as the
    # predictors assume, d_i >= 1), not at t, which would need a second decision at t.
    backend = FakeBackend()
    out = simulate([job("A", 0, 4, run=0, req=10), job("B", 0, 4, run=5, req=10)], backend)
    assert (out.jobs["A"].start, out.jobs["A"].end) == (0, 1)
    assert out.jobs["B"].start == 1
    times = [r.time for r in backend.requests]
    assert len(times) == len(set(times))


def test_oracle_fills_actual_duration() -> None:
    backend = FakeBackend()
    simulate([job("A", 0, 1, run=70, req=50)], backend, options=ReplayOptions(oracle=True))
    request = backend.requests[0]
    assert request.queued_jobs[0].actual_duration == 50  # killed at 50: that is its truth


def test_never_fitting_job_is_dropped_and_counted() -> None:
    backend = FakeBackend()
    out = simulate([job("A", 0, 9, run=5, req=5), job("B", 1, 8, run=5, req=5)], backend,
                   nodes=2, cores=4)
    assert out.dropped == [NEVER_FITS]
    assert list(out.jobs) == ["B"]
    assert out.jobs["B"].units == 2 and out.jobs["B"].nodes == ("n1", "n2")


def test_charge_decision_time_delays_starts() -> None:
    ticks = iter(range(0, 1000, 5))

    def clock() -> float:  # every call appears to take 2.5 s of wall time
        return next(ticks) / 2

    jobs = [job("A", 0, 1, run=10, req=10), job("B", 1, 1, run=10, req=10)]
    plain = simulate(jobs, FakeBackend(), clock=clock)
    assert (plain.jobs["A"].start, plain.jobs["B"].start) == (0, 1)
    ticks = iter(range(0, 1000, 5))
    charged = simulate(jobs, FakeBackend(), clock=clock,
                       options=ReplayOptions(charge_decision_time=True))
    assert charged.jobs["A"].start == 3  # ceil(2.5 s)
    assert charged.jobs["B"].start == 6  # submitted while the first decision was pending
    assert [d.time for d in charged.decisions] == [0, 3]


def over_allocate(request: pb.DispatchRequest) -> pb.DispatchResponse:
    response = fcfs_first_fit(request)
    for q in request.queued_jobs:
        if all(s.job_id != q.id for s in response.starts):
            node = request.nodes[0].id
            response.starts.add(job_id=q.id, expected_duration=q.requested_time,
                                units=[pb.UnitPlacement(node_id=node,
                                                        amounts=dict(q.unit_request))])
            break
    return response


def test_invalid_decision_stops_the_replay() -> None:
    with pytest.raises(InvalidDecisionError) as info:
        simulate([job("A", 0, 4, run=10, req=10), job("B", 5, 2, run=10, req=10)],
                 FakeBackend(over_allocate))
    assert info.value.time == 5
    assert "over capacity" in str(info.value) and "n1" in str(info.value)


@pytest.mark.parametrize(
    ("tamper", "message"),
    [
        (lambda r: setattr(r.starts[0].units[0], "node_id", "nope"), "unknown node"),
        (lambda r: r.starts[0].units[0].amounts.__setitem__("core", 1), "instead of its request"),
        (lambda r: setattr(r, "time", r.time + 1), "response time"),
        (lambda r: setattr(r.starts[0], "job_id", "ghost"), "not a queued job"),
        (lambda r: r.starts[0].units.add(node_id="n1", amounts={"core": 2}), "units"),
    ],
)
def test_other_invalid_decisions(
    tamper: Callable[[pb.DispatchResponse], object], message: str
) -> None:
    def decide(request: pb.DispatchRequest) -> pb.DispatchResponse:
        response = fcfs_first_fit(request)
        tamper(response)
        return response

    with pytest.raises(InvalidDecisionError, match=message):
        simulate([job("A", 0, 2, run=10, req=10)], FakeBackend(decide))


def test_a_dispatcher_that_never_starts_anything_is_a_stall() -> None:
    def nothing(request: pb.DispatchRequest) -> pb.DispatchResponse:
        return pb.DispatchResponse(time=request.time)

    backend = FakeBackend(nothing)
    with pytest.raises(SimulationError, match="stalled at t=3"):
        simulate([job("A", 0, 1, run=10, req=10)], backend,
                 options=ReplayOptions(stall_retries=3))
    assert [r.time for r in backend.requests] == [0, 1, 2, 3]


def test_recorder_sums_up_a_run() -> None:
    system = homogeneous("test", 1, {"core": 4})
    recorder = RunRecorder(None)
    sim = Simulator(system, UnitRule(cores_per_node=4), FakeBackend(),
                    recorder)
    result = sim.run([job("A", 0, 4, run=100, req=200), job("B", 0, 2, run=50, req=100)])
    summary = recorder.summary(first_submit=result.first_submit, last_end=result.last_end,
                               total_cores=4, replay_seconds=result.wall_seconds, meta={},
                               cleaning={})
    assert summary["jobs"] == 2 and summary["makespan_seconds"] == 150
    assert summary["wait_seconds"]["mean"] == pytest.approx(50)
    assert summary["utilisation"] == pytest.approx((4 * 100 + 2 * 50) / (4 * 150))
    acc = summary["predictor_accuracy"]
    assert acc["mae_seconds"] == pytest.approx(75) and acc["overestimation_rate"] == 1.0
    assert acc["actual_over_predicted"]["bins"]["0.5-0.75"] == 2  # both ran half their limit
    assert acc["actual_over_predicted"]["bins"]["0.25-0.5"] == 0
    assert summary["decisions"] == 2
