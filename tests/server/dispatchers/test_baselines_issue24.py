"""Issue #24's baselines: EASY-SJBF, EASY-LXF, LOS, EASY-k, and conservative's guarantee.

Each policy's defining property on small hand-made instances (worked out in the comments),
decided through the service's own pipeline with the independent check; EASY-k's protection of
its k reservations over random snapshots; and conservative backfilling's classic guarantee on
a replay of the bundled KTH-SP2 slice: no job starts later than its reservation at arrival.
"""

from __future__ import annotations

import csv
import dataclasses
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from hpcdispatch.catalog import DISPATCHER_NAMES
from hpcdispatch.server.config import ServerConfig
from hpcdispatch.server.dispatchers import BY_NAME, DISPATCHERS
from hpcdispatch.server.dispatchers.backfill import plan_backfill
from hpcdispatch.server.dispatchers.base import SearchControl
from hpcdispatch.server.dispatchers.conservative import (
    ConservativeDispatcher,
    Held,
    plan_reservations,
)
from hpcdispatch.server.dispatchers.planning.job_orders import fcfs
from hpcdispatch.server.dispatchers.planning.problem import Problem
from hpcdispatch.server.dispatchers.planning.processor_packing import pack
from hpcdispatch.server.domain.outcome_kinds import SkipReason
from hpcdispatch.server.intake.validation import validate_dispatch_request
from hpcdispatch.snapshot import Snapshot
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.instances import FAST, T, decide, node, problem_of, queued, running, started
from tests.server.dispatchers.test_decision_property import snapshots

NEW = ("easy-sjbf", "easy-lxf", "los", "easy-k")


def test_the_new_baselines_are_registered_by_their_contract_names() -> None:
    for name in NEW:
        assert BY_NAME[name].name == name
        assert DISPATCHERS[DISPATCHER_NAMES[name]] is BY_NAME[name]


# One node of 4 cores; r holds 3 of them until t + 100, so 1 core is free now. The head A
# (4 cores, oldest) is reserved at 100 and takes the whole node then: only a job that ends by
# 100 may start now, and only one (1 core free). At t = 1000, expansion factors (w + d) / d:
#   B: d 90, q 800  -> (200 + 90) / 90 = 3.2   oldest: EASY's choice
#   C: d 10, q 950  -> (50 + 10) / 10  = 6.0   largest expansion factor: LXF's choice
#   E: d 5,  q 995  -> (5 + 5) / 5     = 2.0   shortest: SJBF's choice
BACKFILL_ORDER = Snapshot(
    T, (node(1),), (running("r", "n1", 3, 100),),
    (
        queued("A", 4, 100, submit=700),
        queued("B", 1, 90, submit=800),
        queued("C", 1, 10, submit=950),
        queued("E", 1, 5, submit=995),
    ),
)


@pytest.mark.parametrize(("name", "expected"),
                         [("easy", "B"), ("easy-sjbf", "E"), ("easy-lxf", "C")])
def test_backfill_orders_pick_their_job_behind_the_fcfs_head(name: str, expected: str) -> None:
    outcome, decision = decide(name, BACKFILL_ORDER)
    assert started(decision) == {expected}
    problem = problem_of(BACKFILL_ORDER)
    assert problem.jobs[outcome.considered[0]].id == "A"  # the head is the oldest job


def test_the_head_is_in_submit_order_even_when_the_backfill_order_differs() -> None:
    # Two blocked 4-core jobs: the older (A) is the head under SJBF and LXF although X is
    # shorter and has the larger expansion factor; X does not start (it would delay A).
    snap = Snapshot(T, (node(1),), (running("r", "n1", 3, 100),),
                    (queued("A", 4, 1000, submit=100), queued("X", 4, 1, submit=990)))
    for name in ("easy-sjbf", "easy-lxf"):
        outcome, decision = decide(name, snap)
        assert started(decision) == set()
        assert [problem_of(snap).jobs[i].id for i in outcome.considered] == ["A"]


# One node of 10 cores; r holds 4 until t + 100 (6 free now). The head A (10 cores) is
# reserved at 100. B (4 cores), C and D (3 cores each) all end by 100. EASY starts B (submit
# order), then neither C nor D fits the 2 cores left: 4 cores used. LOS starts C and D: 6.
LOS_PACK = Snapshot(
    T, (node(1, cores=10),), (running("r", "n1", 4, 100),),
    (
        queued("A", 10, 100, submit=700),
        queued("B", 4, 50, submit=800),
        queued("C", 3, 50, submit=810),
        queued("D", 3, 50, submit=820),
    ),
)


def test_los_starts_the_set_using_the_most_processors_now() -> None:
    _, easy = decide("easy", LOS_PACK)
    assert started(easy) == {"B"}
    _, los = decide("los", LOS_PACK)
    assert started(los) == {"C", "D"}


# Same node; A (8 cores) reserved at 100 leaves 2 cores at 100 ("extra"). B (2 cores) and D
# (3 cores) run past 100; C (3 cores) ends before. Most processors now without delaying A:
# {B, C} = 5 ({C, D} = 6 would hold 3 cores past 100, more than the 2 A leaves).
LOS_EXTRA = Snapshot(
    T, (node(1, cores=10),), (running("r", "n1", 4, 100),),
    (
        queued("A", 8, 100, submit=700),
        queued("D", 3, 1000, submit=790),
        queued("B", 2, 1000, submit=800),
        queued("C", 3, 50, submit=810),
    ),
)


def test_los_never_delays_the_head() -> None:
    _, los = decide("los", LOS_EXTRA)
    assert started(los) == {"B", "C"}


def test_los_lookahead_depth_bounds_the_jobs_considered() -> None:
    one = dataclasses.replace(FAST, lookahead_depth=1)
    outcome, los = decide("los", LOS_PACK, one)
    assert started(los) == {"B"}  # only B is looked at
    ids = {problem_of(LOS_PACK).jobs[i].id: r for i, r in outcome.skipped}
    assert ids["C"] == ids["D"] == SkipReason.OUTSIDE_WINDOW


@pytest.mark.parametrize(
    ("jobs", "now", "extra", "expected"),
    [
        ([(4, False), (3, False), (3, False)], 6, 0, [1, 2]),
        ([(3, True), (2, True), (3, False)], 6, 2, [1, 2]),
        ([(7, False)], 6, 6, []),
        ([(1, True)] * 3, 10, 2, [1, 2]),
    ],
)
def test_pack_maximises_processors_now_within_both_bounds(
    jobs: list[tuple[int, bool]], now: int, extra: int, expected: list[int]
) -> None:
    chosen = pack(jobs, now, extra)
    assert sum(jobs[k][0] for k in chosen) == sum(jobs[k][0] for k in expected)
    assert sum(jobs[k][0] for k in chosen) <= now
    assert sum(jobs[k][0] for k in chosen if jobs[k][1]) <= extra


# tests/server/dispatchers/test_baselines.py's PROTECTION: one node of 4 cores, 1 free now; A
# reserved at 100,
# C (4 cores) at 200 when it holds a reservation; D (1 core, d 1000) fits now but would run
# through C's; E (1 core, d 100) ends by A's start. k = 1 is EASY (D starts); k = 2 protects
# C too, so D waits and E starts, as under conservative backfilling.
PROTECTION = Snapshot(
    T, (node(1),), (running("r", "n1", 3, 100),),
    (
        queued("A", 2, 100, submit=900),
        queued("C", 4, 100, submit=910),
        queued("D", 1, 1000, submit=920),
        queued("E", 1, 100, submit=930),
    ),
)


@pytest.mark.parametrize(("k", "expected"), [(1, {"D"}), (2, {"E"}), (64, {"E"})])
def test_easy_k_protects_the_first_k_reservations(k: int, expected: set[str]) -> None:
    _, decision = decide("easy-k", PROTECTION, dataclasses.replace(FAST, reservation_depth=k))
    assert started(decision) == expected


def _ids(problem: Problem, reservations: dict[int, tuple[int, list[int]]]) -> dict[str, int]:
    return {problem.jobs[i].id: s for i, (s, _) in reservations.items()}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot=snapshots())
def test_easy_k_never_delays_any_of_its_k_reservations(snapshot: Snapshot) -> None:
    """Each of the first k reservations is what it would be if no job after it were queued:
    the jobs behind the k-th, started now or not, delay none of them."""
    problem = problem_of(snapshot)
    for k in (1, 2, 3):
        plan = plan_backfill(problem, fcfs(problem), k)
        reserved = [i for i, (s, _) in plan.reservations.items() if s > 0]
        assert len(reserved) <= k
        if not reserved:
            continue
        order = [j.id for j in fcfs(problem)]
        last = order.index(problem.jobs[reserved[-1]].id)
        prefix = Snapshot(snapshot.time, snapshot.nodes, snapshot.running,
                          tuple(q for q in snapshot.queued if q.id in order[: last + 1]))
        alone = problem_of(prefix)
        full = _ids(problem, plan.reservations)
        assert {i: s for i, s in _ids(alone, plan_reservations(alone).reservations).items()
                if s > 0} == {problem.jobs[i].id: full[problem.jobs[i].id] for i in reserved}


@pytest.mark.parametrize("field", ["reservation_depth", "lookahead_depth", "easy_head_depth"])
def test_a_depth_below_one_is_invalid_argument_naming_the_field(field: str) -> None:
    request = pb.DispatchRequest(time=T, nodes=[pb.Node(id="n1", capacity={"core": 4},
                                                          state=pb.NODE_STATE_UP)])
    setattr(request.search, field, 0)
    violations = validate_dispatch_request(request, ServerConfig(), [])
    assert [v.field for v in violations] == [f"search.{field}"]


# -- conservative's guarantee ---------------------------------------------------------------

# A rebuild in submit order at each decision (conservative before #24) moves a younger job
# later when work ends early; compression in start order does not. One node of 4 cores;
# r1 holds 2 until T + 100, r2 2 until T + 300 (predicted):
#   at T:      O (4 cores, d 100, oldest) is reserved at T + 300;
#   at T + 1:  Y (2 cores, d 150) arrives and is reserved at T + 100 (r1's cores until O);
#   at T + 20: r2 has ended, far before its predicted end. A rebuild gives O [T + 100,
#              T + 200) first and Y T + 200: later than its T + 100. Compression takes Y
#              first (earlier start): it starts now, at T + 20, and O moves to T + 170.
def _control() -> SearchControl:
    import time

    return SearchControl(FAST, time.monotonic() + 30)


def test_conservative_never_moves_a_reservation_later_when_work_ends_early() -> None:
    dispatcher = ConservativeDispatcher()
    r1 = running("r1", "n1", 2, 100)
    r2 = running("r2", "n1", 2, 300)
    first = Snapshot(T, (node(1),), (r1, r2), (queued("O", 4, 100, submit=900),))
    _, held = dispatcher.plan(problem_of(first), _control())
    assert held[("O", 900)][0] == T + 300
    second = Snapshot(T + 1, (node(1),), (r1, r2),
                      (queued("O", 4, 100, submit=900), queued("Y", 2, 150, submit=T + 1)))
    _, held = dispatcher.plan(problem_of(second), _control())
    assert held[("Y", T + 1)][0] == T + 100
    # r2 ends at T + 20, far before its predicted end.
    third = Snapshot(T + 20, (node(1),), (r1,), second.queued)
    fresh = _ids(problem_of(third), plan_reservations(problem_of(third)).reservations)
    assert fresh["Y"] + T + 20 > T + 100  # the pre-#24 rebuild would delay Y
    _, held = dispatcher.plan(problem_of(third), _control())
    assert held[("Y", T + 1)][0] <= T + 100
    assert held[("O", 900)][0] <= T + 300


KTH_JOBS = 1000


def test_conservative_replay_no_job_starts_later_than_its_reservation_at_arrival(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bundled KTH-SP2 slice (1,000 jobs, requested times as predictions, jobs killed at
    their requested time): each job's reservation at its first decision, as the dispatcher's
    own plan made it, is an upper bound of its start in jobs.csv."""
    from hpcdispatch.sim_adapter.adapter import DispatchSettings, service_target
    from hpcdispatch.sim_adapter.replay import RunSpec, bundled_trace, replay

    at_arrival: dict[str, int] = {}
    displaced: list[str] = []

    class Recording(ConservativeDispatcher):
        def plan(self, problem: Problem, control: SearchControl) -> tuple[object, Held]:
            plan, held = super().plan(problem, control)
            for (job_id, _), (start, _) in held.items():
                at_arrival.setdefault(job_id, start)
            displaced.extend(problem.jobs[i].id for i in plan.displaced)  # type: ignore[attr-defined]
            return plan, held

    monkeypatch.setitem(DISPATCHERS, pb.DISPATCHER_CONSERVATIVE, Recording())
    with service_target(None) as target:
        spec = RunSpec(bundled_trace(), DispatchSettings(dispatcher="conservative",
                                                         predictor="walltime"),
                       limit_jobs=KTH_JOBS)
        summary = replay(spec, target, tmp_path)
    assert summary["jobs"] == KTH_JOBS
    with (tmp_path / "jobs.csv").open(newline="") as handle:
        jobs = list(csv.DictReader(handle))
    late = [(j["job_id"], at_arrival[j["job_id"]], int(j["start"])) for j in jobs
            if int(j["start"]) > at_arrival[j["job_id"]]]
    assert not displaced
    assert not late, late[:10]
    # The guarantee binds: some jobs start before their reservation at arrival (compression).
    assert any(int(j["start"]) < at_arrival[j["job_id"]] for j in jobs)


# Nodes n1, n2, n3 of one core; n2 and n3 run work until T + 100, n1 is free now. A (2 units)
# holds [T + 100, T + 200) on n1 and n2 from an earlier decision. B (1 unit, d 200) fits
# now in the pooled view (one core free at every time), but not node by node: n1 is A's at
# T + 100. Moving A's reservation onto n2 and n3 (same start) lets B start now on n1: the
# KTH-SP2 job 218 case (a 4-core job that fitted the free cores and waited 6,679 s).
def test_conservative_repacks_reservations_so_a_pooled_fit_starts_now() -> None:
    snap = Snapshot(
        T, (node(1, cores=1), node(2, cores=1), node(3, cores=1)),
        (running("r2", "n2", 1, 100), running("r3", "n3", 1, 100)),
        (queued("A", 1, 100, submit=900, units=2), queued("B", 1, 200, submit=950)),
    )
    problem = problem_of(snap)
    held = {0: (100, [0, 1])}
    pinned = _ids(problem, plan_backfill(problem, fcfs(problem), held=held).reservations)
    assert pinned == {"A": 100, "B": 100}
    repacked = plan_backfill(problem, fcfs(problem), held=held, repack=True)
    assert _ids(problem, repacked.reservations) == {"A": 100, "B": 0}
    assert sorted(repacked.reservations[0][1]) == [1, 2]
