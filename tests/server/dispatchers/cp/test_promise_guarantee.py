"""A promise is a guarantee (issue #49): the book computes it against requested times, so only
what no dispatcher controls moves it later — a job running past its limit, a node going down —
and then it is promised again at once, reported with seconds and a reason; beside each promise
the likely start of the predicted plan, never later than it."""

from __future__ import annotations

import dataclasses
import time

from hpcdispatch.catalog import DISPATCHER_NAMES
from hpcdispatch.server.dispatchers import DISPATCHERS
from hpcdispatch.server.dispatchers.base import Outcome, SearchControl
from hpcdispatch.server.dispatchers.planning.problem import build_problem
from hpcdispatch.server.domain.outcome_kinds import PromiseMove
from hpcdispatch.server.domain.profiles import PROFILES
from hpcdispatch.snapshot import Node, NodeState, QueuedJob, RunningJob, Snapshot, UnitAllocation
from tests.instances import T

BOOK = dataclasses.replace(PROFILES["book"][0], promise_after_s=0, deterministic=True)


def nodes(prefix: str, count: int, down: tuple[int, ...] = ()) -> tuple[Node, ...]:
    return tuple(Node(f"{prefix}{i}", NodeState.DOWN if i in down else NodeState.UP,
                      {"core": 1}) for i in range(count))


def run(job_id: str, node_id: str, requested: int, predicted: int) -> RunningJob:
    return RunningJob(id=job_id, user="u", name="r", start_time=T - 10,
                      requested_time=requested, expected_duration=predicted,
                      units=(UnitAllocation(node_id, {"core": 1}),))


def wide(units: int, requested: int = 500) -> QueuedJob:
    return QueuedJob(id="wide", user="u", name="q", queue="q", submit_time=T - 100,
                     units=units, unit_request={"core": 1}, requested_time=requested)


def decide(snapshot: Snapshot, predicted: dict[str, int]) -> Outcome:
    running = {r.id: r.expected_duration or r.requested_time for r in snapshot.running}
    problem = build_problem(snapshot, predicted, running)
    control = SearchControl(BOOK, time.monotonic() + 60)
    return DISPATCHERS[DISPATCHER_NAMES["pcp20"]].decide(problem, control)


def test_a_promise_is_made_at_the_requested_times_with_the_likely_start_beside_it() -> None:
    # r0 is predicted to end at T + 40 but may run to T + 190 (its requested time): the
    # promise of "wide" (both nodes) is at the limit, its likely start at the prediction.
    snap = Snapshot(T, nodes("g", 2), (run("r0", "g0", 200, 50),), (wide(2),))
    outcome = decide(snap, {"wide": 100})
    assert outcome.expected_starts[0] == (190, True)
    assert outcome.likely_starts[0] == 40


def test_a_job_running_past_its_limit_moves_the_promise_with_its_reason() -> None:
    snap = Snapshot(T, nodes("p", 2), (run("r0", "p0", 100, 100),), (wide(2),))
    first = decide(snap, {"wide": 500})
    assert first.expected_starts[0] == (90, True)  # r0's limit: T + 90
    # At T + 120, r0 still runs, 30 s past its limit: the promise (T + 90) is due and cannot
    # be kept; it moves to the next second, at once, and says why.
    later = dataclasses.replace(snap, time=T + 120)
    moved = decide(later, {"wide": 500})
    assert moved.placements == {}
    assert moved.promises_moved == {0: 1}
    assert moved.promise_move_reasons == {0: PromiseMove.RAN_PAST_LIMIT}


def test_a_node_going_down_moves_the_promise_with_its_reason() -> None:
    # q0, q1 busy until T + 90 at most, q2, q3 until T + 290: "wide" (2 nodes) is promised at
    # T + 90 on q0 and q1. Then q1 goes down: the next room for two is at T + 290.
    running = (run("r0", "q0", 100, 100), run("r1", "q1", 100, 100),
               run("r2", "q2", 300, 300), run("r3", "q3", 300, 300))
    snap = Snapshot(T, nodes("q", 4), running, (wide(2),))
    first = decide(snap, {"wide": 500})
    assert first.expected_starts[0] == (90, True)
    down = Snapshot(T + 10, nodes("q", 4, down=(1,)), (running[0], *running[2:]), (wide(2),))
    moved = decide(down, {"wide": 500})
    assert moved.promises_moved == {0: 200}
    assert moved.promise_move_reasons == {0: PromiseMove.NODE_UNAVAILABLE}
    assert moved.expected_starts[0] == (280, True)


def test_a_baseline_promises_only_a_reservation_planned_at_the_requested_times() -> None:
    # r0 on e0 is predicted to end at T + 40 but may run to T + 190; "wide" needs both nodes.
    # EASY's (LOS's, EASY-k's, conservative's) reservation for it at T + 40 rests on that
    # prediction, which r0 may outrun: it is an estimate, never shown as a promise. Planned on
    # the requested times (predictor walltime), the same reservation, T + 190, is a promise.
    # The decision itself is the dispatcher's either way (the short job backfills on e1).
    short = QueuedJob(id="short", user="u", name="q", queue="q", submit_time=T - 50, units=1,
                      unit_request={"core": 1}, requested_time=30)
    snap = Snapshot(T, nodes("e", 2), (run("r0", "e0", 200, 50),), (wide(2), short))
    predicted = build_problem(snap, {"wide": 100, "short": 30}, {"r0": 50})
    at_limits = build_problem(snap, {"wide": 500, "short": 30}, {"r0": 200})
    for name in ("easy", "los", "easy-k", "conservative"):
        control = SearchControl(dataclasses.replace(BOOK, promise_after_s=-1),
                                time.monotonic() + 60)
        outcome = DISPATCHERS[DISPATCHER_NAMES[name]].decide(predicted, control)
        assert outcome.expected_starts[0] == (40, False), name
        assert set(outcome.placements) == {1}, name
        outcome = DISPATCHERS[DISPATCHER_NAMES[name]].decide(at_limits, control)
        assert outcome.expected_starts[0] == (190, True), name
