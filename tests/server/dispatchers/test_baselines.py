"""The backfilling baselines: EASY with RLScheduler's queue orders, and conservative backfilling.

Hand-made instances whose expected starts follow from the formulas (worked out in the
comments), decided through the service's own pipeline with the independent check; and a
property of conservative backfilling over random snapshots: a job's reservation does not
depend on the jobs queued after it, and the plan of reservations never overfills a node.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings

from hpcdispatch.server.dispatchers.backfill import plan_backfill
from hpcdispatch.server.dispatchers.conservative import plan_reservations
from hpcdispatch.server.dispatchers.planning import job_orders
from hpcdispatch.server.dispatchers.planning.job_orders import fcfs
from hpcdispatch.snapshot import Snapshot
from tests.instances import T, decide, node, problem_of, queued, running, started
from tests.server.dispatchers.test_decision_property import snapshots

# One node of 256 cores, empty. Scores at t = 1000 (w = t - q, n = cores):
#   job  n    d       q    | WFP3 (w/d)^3 n | UNICEF w/(log2 n d) | F1 log10(d) n + 870 log10(q)
#   F    256  100000  100  | 1.9e-4         | 1.1e-3              | 1280 + 1740 = 3020
#   X    2    5000    150  | 9.8e-3         | 0.17                | 7.4 + 1893 = 1900
#   W    256  100     500  | 32000          | 0.625               | 512 + 2348 = 2860
#   U    1    20000   950  | 1.6e-8         | ~3.5e12 (log2 1 ~ 0)| 4.3 + 2591 = 2595
#   S    256  5       990  | 2048           | 0.25                | 179 + 2606 = 2785
# Firsts: FCFS F, SJF S, WFP3 W, UNICEF U, F1 X.
ORDER_JOBS = (
    queued("F", 256, 100_000, submit=100),
    queued("X", 2, 5_000, submit=150),
    queued("W", 256, 100, submit=500),
    queued("U", 1, 20_000, submit=950),
    queued("S", 256, 5, submit=990),
)
ORDERS = Snapshot(T, (node(1, cores=256),), (), ORDER_JOBS)


@pytest.mark.parametrize(
    ("order", "expected"),
    [
        (job_orders.fcfs, "FXWUS"),
        (job_orders.sjf, "SWXUF"),
        (job_orders.wfp3, "WSXFU"),
        (job_orders.unicef, "UWSXF"),
        (job_orders.f1, "XUSWF"),
    ],
)
def test_each_order_ranks_the_queue_by_its_formula(order: job_orders.JobOrder,
                                                   expected: str) -> None:
    assert "".join(j.id for j in order(problem_of(ORDERS))) == expected


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("easy", {"F"}),  # F takes the node; X is the head; nothing else fits now
        ("easy-sjf", {"S"}),
        ("easy-wfp3", {"W"}),
        # U (1 core) starts; W (256) is the head, reserved at U's end (20000); X (2 cores,
        # ends at 5000 <= 20000) backfills into the 255 free cores.
        ("easy-unicef", {"U", "X"}),
        # X, then U start in order; S (256) is the head; W and F cannot fit now.
        ("easy-f1", {"X", "U"}),
        ("conservative", {"F"}),
    ],
)
def test_each_order_picks_its_own_head(name: str, expected: set[str]) -> None:
    _, decision = decide(name, ORDERS)
    assert started(decision) == expected


def test_processors_are_units_times_cores_per_unit() -> None:
    snap = Snapshot(T, (node(1, cores=8), node(2, cores=8)), (),
                    (queued("a", 4, 10, units=2), queued("b", 1, 10)))
    problem = problem_of(snap)
    assert [job_orders.processors(problem, j) for j in problem.jobs] == [8, 1]


# One node of 4 cores; r holds 3 of them until t + 100, so 1 core is free now. In submit order:
#   A: 2 cores, d 100   - the head: reserved [100, 200), leaving 2 cores there
#   C: 4 cores, d 100   - conservative: reserved [200, 300); EASY does not protect it
#   D: 1 core,  d 1000  - fits now, and into EASY's limit (min(1 free now, 2 left at 100)), so
#                         EASY starts it, although it then runs through C's reservation;
#                         conservative reserves it at 300, after C
#   E: 1 core,  d 100   - conservative: ends at 100, before A, so it starts now; under EASY,
#                         D has taken the free core
PROTECTION = Snapshot(
    T, (node(1),), (running("r", "n1", 3, 100),),
    (
        queued("A", 2, 100, submit=900),
        queued("C", 4, 100, submit=910),
        queued("D", 1, 1000, submit=920),
        queued("E", 1, 100, submit=930),
    ),
)


def test_easy_protects_the_head_only_conservative_every_job() -> None:
    _, easy = decide("easy", PROTECTION)
    assert started(easy) == {"D"}
    _, conservative = decide("conservative", PROTECTION)
    assert started(conservative) == {"E"}
    plan = plan_reservations(problem_of(PROTECTION))
    ids = {problem_of(PROTECTION).jobs[i].id: start for i, (start, _) in
           plan.reservations.items()}
    assert ids == {"A": 100, "C": 200, "D": 300, "E": 0}


def _reservations(snapshot: Snapshot) -> dict[str, tuple[int, list[int]]]:
    problem = problem_of(snapshot)
    plan = plan_reservations(problem)
    return {problem.jobs[i].id: r for i, r in plan.reservations.items()}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot=snapshots())
def test_conservative_reservations_never_move_for_later_jobs(snapshot: Snapshot) -> None:
    """A job's reservation is the same whether or not later jobs are queued (none of them can
    delay it), and every job whose reservation is now is started, and only those, unless
    moving later reservations to other nodes lets a job start now (the dispatcher's repack,
    tests/server/dispatchers/test_baselines_issue24.py)."""
    full = _reservations(snapshot)
    in_order = sorted(snapshot.queued, key=lambda q: q.submit_time)
    for k in range(len(in_order)):
        earlier = {q.id for q in in_order[:k]}
        prefix = Snapshot(snapshot.time, snapshot.nodes, snapshot.running,
                          tuple(q for q in snapshot.queued if q.id in earlier))
        assert _reservations(prefix) == {i: r for i, r in full.items() if i in earlier}
    _, decision = decide("conservative", snapshot)
    problem = problem_of(snapshot)
    repacked = plan_backfill(problem, fcfs(problem), repack=True)
    assert started(decision) == {problem.jobs[i].id for i, (start, _) in
                                 repacked.reservations.items() if start == 0}
    assert started(decision) >= {i for i, (start, _) in full.items() if start == 0}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshot=snapshots())
def test_conservative_plan_never_overfills_a_node(snapshot: Snapshot) -> None:
    """Independently of the profile it was built with: at every start or end in the plan, the
    running work (until its predicted end) and the reservations fit each node's capacity."""
    problem = problem_of(snapshot)
    plan = plan_reservations(problem)
    use: dict[int, list[tuple[int, int, tuple[int, ...]]]] = defaultdict(list)
    for b in problem.blocks:
        use[b.node].append((0, b.end, b.amounts))
    for i, (start, nodes) in plan.reservations.items():
        job = problem.jobs[i]
        assert all(problem.eligible[n] for n in nodes)
        for n in nodes:
            use[n].append((start, start + job.duration, job.req))
    for n, spans in use.items():
        for instant in {s for s, _, _ in spans}:
            held = [sum(a[r] for s, e, a in spans if s <= instant < e)
                    for r in range(len(problem.resources))]
            assert all(h <= c for h, c in zip(held, problem.capacity[n], strict=True)), (
                n, instant, held)
