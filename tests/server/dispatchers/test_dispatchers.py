"""Each dispatcher on small instances whose right answer is known."""

from __future__ import annotations

import dataclasses

import pytest
from ortools.sat.python import cp_model

from hpcdispatch.catalog import CP_DISPATCHER_NAMES, DISPATCHER_NAMES
from hpcdispatch.decision_check import check_decision
from hpcdispatch.server.dispatchers import BY_NAME
from hpcdispatch.server.dispatchers.cp.cp_dispatch import CpDispatcher
from hpcdispatch.server.dispatchers.cp.cp_schedule import build_schedule_model
from hpcdispatch.server.dispatchers.cp.cpsat_attempt import SolutionValues, model_size
from hpcdispatch.server.dispatchers.planning.greedy_schedule import greedy_schedule
from hpcdispatch.server.dispatchers.planning.problem import later_start_bounds
from hpcdispatch.server.dispatchers.planning.stopping import never
from hpcdispatch.server.domain.outcome_kinds import SkipReason, SolveStatus
from hpcdispatch.server.domain.profiles import DEFAULT_PROFILE, PROFILES, resolve_settings
from hpcdispatch.server.domain.search_settings import SearchRequest
from hpcdispatch.snapshot import NodeState, Snapshot
from tests.instances import (
    FAST,
    FAST_WITH_HEAD,
    T,
    decide,
    node,
    problem_of,
    queued,
    running,
    started,
)

ALL = sorted(DISPATCHER_NAMES)
CP = list(CP_DISPATCHER_NAMES)


def test_fcfs_stops_at_the_first_job_that_does_not_fit() -> None:
    snap = Snapshot(
        T, (node(1), node(2)), (running("r", "n1", 4, 100),),
        (queued("a", 4, 50, submit=T - 30), queued("b", 4, 50, submit=T - 20),
         queued("c", 1, 50, submit=T - 10)),
    )
    _, decision = decide("fcfs", snap)
    assert started(decision) == {"a"}  # b blocks c although c would fit


def test_easy_backfills_a_job_that_ends_before_the_reservation() -> None:
    # n1 busy until T+100; head "big" needs both nodes; n2 is free now.
    snap = Snapshot(
        T, (node(1), node(2)), (running("r", "n1", 4, 100),),
        (queued("big", 4, 500, submit=T - 30, units=2), queued("long", 4, 1000, submit=T - 20),
         queued("short", 4, 90, submit=T - 10)),
    )
    outcome, decision = decide("easy", snap)
    assert started(decision) == {"short"}  # "long" would delay the head's reservation
    reasons = {snap.queued[i].id: r for i, r in outcome.skipped}
    assert reasons["long"] == SkipReason.BLOCKED
    assert check_decision(snap, decision) == []


def test_easy_backfills_a_long_job_on_resources_the_reservation_leaves_free() -> None:
    # Head needs a whole 8-core node: reserved on n1 at T+100. n2's 4 cores are not needed by
    # the reservation, so a long job may start there now, but not on n1's 4 free cores.
    snap = Snapshot(
        T, (node(1, cores=8), node(2)), (running("r", "n1", 4, 100),),
        (queued("head", 8, 500, submit=T - 30), queued("long", 4, 10_000, submit=T - 10)),
    )
    _, decision = decide("easy", snap)
    assert [(s.job_id, s.nodes) for s in decision.starts] == [("long", ("n2",))]


def test_easy_protects_the_reservation_node_by_node() -> None:
    # n1: 4 cores busy until T+100. n2: 4 free cores. Head needs 2 units of 4 cores -> needs
    # n1 and n2 at T+100. "long" (2 cores, ends after T+100) fits n2 now but would take cores
    # the reservation needs; "short" ends before T+100 and may use n2.
    snap = Snapshot(
        T, (node(1), node(2)), (running("r", "n1", 4, 100),),
        (queued("head", 4, 500, submit=T - 30, units=2), queued("long", 2, 5000, submit=T - 20),
         queued("short", 2, 50, submit=T - 10)),
    )
    _, decision = decide("easy", snap)
    assert started(decision) == {"short"}


@pytest.mark.parametrize("name", CP)
def test_slowdown_minimising_dispatchers_differ_from_easy(name: str) -> None:
    # One free node: EASY starts the older long job; minimising total slowdown starts the
    # short one first (its slowdown grows 100× faster).
    snap = Snapshot(
        T, (node(1),), (),
        (queued("old_long", 4, 10_000, submit=T - 60), queued("new_short", 4, 100, submit=T - 50)),
    )
    _, easy = decide("easy", snap)
    outcome, cp = decide(name, snap)
    assert started(easy) == {"old_long"}
    assert started(cp) == {"new_short"}
    assert outcome.objective is not None
    # Objective = Σ (s - q + d) / d with new_short at T, old_long at T + 100.
    expected = (T - (T - 50) + 100) / 100 + (T + 100 - (T - 60) + 10_000) / 10_000
    assert outcome.objective == pytest.approx(expected)


@pytest.mark.parametrize("name", ALL)
def test_nothing_fits_at_t(name: str) -> None:
    snap = Snapshot(
        T, (node(1), node(2)),
        (running("r1", "n1", 4, 100), running("r2", "n2", 3, 100)),
        (queued("a", 2, 50), queued("b", 4, 50, units=2)),
    )
    outcome, decision = decide(name, snap)
    assert decision.starts == []
    reasons = dict(outcome.skipped)
    if name in CP:
        assert outcome.status == SolveStatus.EMPTY
        assert set(reasons.values()) == {SkipReason.CANNOT_FIT_NOW}


@pytest.mark.parametrize("name", ALL)
def test_a_job_larger_than_the_system_is_reported_and_does_not_block(name: str) -> None:
    snap = Snapshot(
        T, (node(1), node(2, state=NodeState.DOWN)), (),
        (queued("huge", 4, 50, submit=T - 50, units=2), queued("small", 1, 50, submit=T - 10)),
    )
    outcome, decision = decide(name, snap)
    assert started(decision) == {"small"}
    assert (0, SkipReason.NEVER_FITS) in outcome.skipped


@pytest.mark.parametrize("name", ALL)
def test_down_and_drained_nodes_get_no_work(name: str) -> None:
    snap = Snapshot(
        T, (node(1, state=NodeState.DRAINED), node(2, state=NodeState.DOWN), node(3)), (),
        tuple(queued(f"j{i}", 2, 100 + i) for i in range(4)),
    )
    _, decision = decide(name, snap)
    assert {n for s in decision.starts for n in s.nodes} == {"n3"}
    assert len(decision.starts) == 2
    assert check_decision(snap, decision) == []


@pytest.mark.parametrize("name", ALL)
def test_multi_resource_units_stay_on_one_node(name: str) -> None:
    # GPU jobs must land on the GPU node, with their cores there too.
    nodes = (node(1, cores=8), node(2, cores=8, gpu=2), node(3, cores=8))
    snap = Snapshot(
        T, nodes, (running("r", "n2", 2, 100),),
        (queued("g", 3, 100, gpu=1, units=2), queued("c", 8, 100, submit=T - 50)),
    )
    _, decision = decide(name, snap)
    by_job = {s.job_id: s.nodes for s in decision.starts}
    assert by_job.get("g") == ("n2", "n2")
    assert check_decision(snap, decision) == []


@pytest.mark.parametrize("name", ["pcp20", "pcp19"])
def test_exact_allocation_models_see_fragmentation(name: str) -> None:
    # 3 free cores on each of two nodes: three 2-core jobs pool into 6 cores but only two fit.
    snap = Snapshot(
        T, (node(1), node(2)), (running("r1", "n1", 1, 100), running("r2", "n2", 1, 100)),
        tuple(queued(f"j{i}", 2, 100) for i in range(3)),
    )
    outcome, decision = decide(name, snap)
    assert len(decision.starts) == 2
    assert outcome.status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE)


@pytest.mark.parametrize("name", ["hcp19", "pcp20"])
def test_protect_head_keeps_the_oldest_blocked_jobs_reservation(name: str) -> None:
    # n1 busy until T+100, n2 free. "wide" (oldest) needs both nodes: reserved at T+100.
    # "long" would hold n2 past T+100; "short" ends before. Unprotected, both start on n2.
    snap = Snapshot(
        T, (node(1), node(2)), (running("r", "n1", 4, 100),),
        (queued("wide", 4, 500, submit=T - 300, units=2), queued("long", 2, 5000, submit=T - 20),
         queued("short", 2, 50, submit=T - 10)),
    )
    _, unprotected = decide(name, snap)
    assert started(unprotected) == {"long", "short"}
    protected_settings = dataclasses.replace(FAST, protect_head=True)
    outcome, protected = decide(name, snap, protected_settings)
    assert started(protected) == {"short"}
    assert outcome.status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE)
    assert check_decision(snap, protected) == []


@pytest.mark.parametrize("name", ["easy", "hcp19", "pcp20"])
def test_the_head_is_reserved_on_nodes_busy_now(name: str) -> None:
    # The lublin_256 pattern: n4-n7 busy until T+100, n0-n3 free. "wide" (oldest) needs 6 of
    # the 8 one-core nodes at T+100: reserved on n4-n7 and two free ones, it leaves two nodes
    # free now *and* at T+100, where "long" (2 nodes, runs past T+100) may start now. Reserved
    # on the lowest-numbered nodes instead (n0-n5), nothing free now would remain for it.
    nodes = tuple(node(i, cores=1) for i in range(8))
    busy = tuple(running(f"r{i}", f"n{i}", 1, 100) for i in range(4, 8))
    snap = Snapshot(
        T, nodes, busy,
        (queued("wide", 1, 500, submit=T - 300, units=6),
         queued("long", 1, 5000, submit=T - 20, units=2)),
    )
    _, decision = decide(name, snap, dataclasses.replace(FAST, protect_head=True))
    assert started(decision) == {"long"}
    assert check_decision(snap, decision) == []


def test_a_job_not_started_now_waits_for_the_first_end() -> None:
    # Nothing frees resources before T+40 (the running job's end) or before the shortest other
    # job could end (30 s): a plan may not put a job that does not start now at T+1.
    snap = Snapshot(
        T, (node(1), node(2)), (running("r", "n1", 4, 40),),
        (queued("a", 4, 30, submit=T - 50), queued("b", 4, 60, submit=T - 40),
         queued("c", 4, 90, submit=T - 30)),
    )
    problem = problem_of(snap)
    assert later_start_bounds(problem, problem.jobs) == {0: 40, 1: 30, 2: 30}
    schedule = build_schedule_model(problem, problem.jobs, pooled=True)
    for var in schedule.now_literals:
        schedule.model.add(var == 0)  # force every job out of t
    solver = cp_model.CpSolver()
    assert solver.solve(schedule.model) == cp_model.OPTIMAL
    starts = schedule.start_offsets_of(SolutionValues(solver))
    assert all(starts[j.index] >= later_start_bounds(problem, problem.jobs)[j.index]
               for j in problem.jobs)
    # The list schedule (the hint of every attempt) keeps the same rule: a now on n2, b when
    # a ends, c when the running job ends.
    greedy = greedy_schedule(problem, problem.jobs, exact_allocation_now=True)
    assert greedy.start_offsets == {0: 0, 1: 30, 2: 40}


@pytest.mark.parametrize("name", ["easy", *CP])
def test_many_distinct_release_times_with_a_protected_head(name: str) -> None:
    # More distinct running ends than the pooled view keeps (it releases some later); the head
    # reservation must still fit that view, and the short job must start.
    nodes = tuple(node(i, cores=1) for i in range(301))
    running_jobs = tuple(running(f"r{i}", f"n{i}", 1, i + 1) for i in range(300))
    snap = Snapshot(
        T, nodes, running_jobs,
        (queued("head", 1, 500, submit=T - 300, units=2), queued("short", 1, 1, submit=T - 1)),
    )
    outcome, decision = decide(name, snap, dataclasses.replace(FAST, protect_head=True))
    assert started(decision) == {"short"}
    assert outcome.status != SolveStatus.INFEASIBLE


@pytest.mark.parametrize("name", ALL)
def test_requested_times_of_decades_are_dispatched(name: str) -> None:
    # Real traces hold requested times like 738,738,720 s (23 years).
    snap = Snapshot(
        T, (node(1), node(2)), (running("r", "n1", 4, 738_738_720),),
        (queued("decades", 4, 738_738_720, submit=T - 50), queued("short", 4, 60)),
    )
    _, decision = decide(name, snap)
    assert len(decision.starts) == 1
    assert check_decision(snap, decision) == []


@pytest.mark.parametrize("name", CP)
def test_an_idle_machine_is_not_left_idle(name: str) -> None:
    # The end of the lublin_256 replay: three wide jobs on 256 idle one-core nodes. Starting
    # at t + 1 instead of t costs only 1/d_i of slowdown, so a solver stopped early may
    # postpone everything by a second, again and again; the decision must start work now.
    snap = Snapshot(
        9_663_465, tuple(node(i, cores=1) for i in range(256)), (),
        (queued("9674", 1, 43_480, submit=7_543_500, units=111),
         queued("9842", 1, 40_692, submit=7_622_467, units=256),
         queued("9979", 1, 52_574, submit=7_687_350, units=32)),
    )
    for _ in range(3):  # stopping points of the search vary; the rule must always hold
        _, decision = decide(name, snap, FAST_WITH_HEAD)
        assert decision.starts
        assert check_decision(snap, decision) == []


@pytest.mark.parametrize("name", CP)
def test_a_very_wide_job_does_not_idle_the_machine(name: str) -> None:
    # lublin_256 at t = 102,865: the machine is idle, "82" needs 249 of the 256 nodes. Planning
    # it first (behind the short jobs) or after the old 64-node job differ by 0.5 % of total
    # slowdown, but the optimum starts 244 nodes' worth now and the other plan 38. The list
    # schedule in submit order is the optimum here; the fast profile must return it.
    jobs = [("69", 59_674, 64, 15_222), ("82", 64_754, 249, 11_408), ("91", 95_240, 1, 11_748),
            ("92", 96_646, 4, 438), ("93", 96_747, 2, 7_020), ("94", 97_330, 1, 8_770),
            ("95", 97_371, 1, 5_467), ("96", 97_865, 66, 12_857), ("97", 99_243, 32, 7_467),
            ("98", 100_524, 16, 8), ("99", 102_309, 1, 111), ("100", 102_523, 16, 6)]
    snap = Snapshot(
        102_865, tuple(node(i, cores=1) for i in range(256)), (),
        tuple(queued(i, 1, d, submit=q, units=u) for i, q, u, d in jobs),
    )
    outcome, decision = decide(name, snap, FAST_WITH_HEAD)
    assert started(decision) == {i for i, *_ in jobs} - {"82"}
    assert outcome.objective == pytest.approx(392.3757, abs=1e-3)
    assert check_decision(snap, decision) == []


def _idle_system(nodes: int) -> Snapshot:
    return Snapshot(
        T, tuple(node(i, cores=8) for i in range(nodes)), (),
        tuple(queued(f"j{i}", 2 + i % 3, 100 + 10 * i, units=1 + i % 3) for i in range(12)),
    )


def _model_variables(name: str, snapshot: Snapshot) -> int:
    """Variables of the dispatcher's model for all queued jobs (built even where every job
    could start now, which the dispatcher itself answers without a model)."""
    problem = problem_of(snapshot)
    heuristic = greedy_schedule(problem, problem.jobs, exact_allocation_now=True)
    dispatcher = BY_NAME[name]
    assert isinstance(dispatcher, CpDispatcher)
    formulation = dispatcher.formulate(problem, problem.jobs, never, heuristic, None)
    return model_size(formulation.model)[0]


def test_pcp20_variable_count_does_not_depend_on_the_node_count() -> None:
    sizes = {nodes: _model_variables("pcp20", _idle_system(nodes)) for nodes in (8, 80, 800)}
    assert sizes[8] == sizes[80] == sizes[800] > 0
    # |Q| starts + |Q| now-literals + Σ rn_i positions (one resource type used).
    jobs = problem_of(_idle_system(8)).jobs
    assert sizes[8] == 2 * len(jobs) + sum(j.units for j in jobs)


@pytest.mark.parametrize("name", ["pcp19", "pcp20"])
def test_a_window_that_all_starts_now_needs_no_search(name: str) -> None:
    # On 80 idle nodes all 12 jobs start at t: each s_i is at its lower bound, so the list
    # schedule is optimal and no model is built (most decisions on a lightly loaded system).
    outcome, decision = decide(name, _idle_system(80))
    assert len(decision.starts) == 12 and outcome.status == SolveStatus.OPTIMAL
    assert outcome.attempts == [] and outcome.variables == 0
    assert check_decision(_idle_system(80), decision) == []
    # On 8 nodes they do not all fit: the model is built and searched.
    outcome, decision = decide(name, _idle_system(8))
    assert outcome.attempts and outcome.variables > 0
    assert check_decision(_idle_system(8), decision) == []


def test_pcp19_variable_count_grows_with_the_node_count() -> None:
    assert _model_variables("pcp19", _idle_system(80)) > 5 * _model_variables(
        "pcp19", _idle_system(8)
    )


def _old_long_job_behind_short_ones() -> Snapshot:
    # One free node. "long" (10,000 s) has waited 30 h; two short jobs fit the same node.
    # Total slowdown prefers a short job now (postponing "long" by 50 s costs 0.005; the
    # other way round 200), so under the papers' objective "long" waits at every decision.
    return Snapshot(
        T, (node(1), node(2)), (running("r", "n1", 4, 5_000),),
        (queued("long", 4, 10_000, submit=T - 30 * 3600), queued("s1", 4, 50, submit=T - 60),
         queued("s2", 4, 50, submit=T - 30)),
    )


@pytest.mark.parametrize("name", ["hcp19", "pcp20"])
def test_the_default_profile_guards_a_starving_job_the_papers_objective_passes_over(
    name: str,
) -> None:
    snap = _old_long_job_behind_short_ones()
    papers = dataclasses.replace(PROFILES["papers"][0], delta_ms=200, delta_max_ms=800)
    _, decision = decide(name, snap, papers)
    assert started(decision) == {"s1"}
    _, decision = decide(name, snap, FAST_WITH_HEAD)
    assert started(decision) == {"s1"}  # the old default: no guard for a job that fits now
    assert DEFAULT_PROFILE == "book"
    for profile in (DEFAULT_PROFILE, "qos"):  # a promise after 24 h; the guard after 24 h
        outcome, decision = decide(name, snap, PROFILES[profile][0])
        assert started(decision) == {"long"}, profile
        assert check_decision(snap, decision) == []
        assert outcome.status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE,
                                  SolveStatus.HEURISTIC)


def test_the_papers_profile_keeps_the_papers_objective() -> None:
    """No reservation, no guard, no extra orders, no pass beyond the window: the papers'
    reductions and objective only, so it decides as before issue #13."""
    papers = PROFILES["papers"][0]
    assert not (papers.protect_head or papers.starvation_wait_s or papers.more_orders
                or papers.work_conserving)
    assert resolve_settings(SearchRequest("papers"), DEFAULT_PROFILE) == papers


def test_search_parameters_override_the_new_knobs() -> None:
    search = SearchRequest(overrides={"starvation_wait_s": 3_600, "more_orders": True,
                                      "work_conserving": False})
    settings = resolve_settings(search, "qos")
    assert (settings.starvation_wait_s, settings.more_orders, settings.work_conserving) == (
        3_600, True, False)
    negative = SearchRequest(overrides={"starvation_wait_s": -5})
    assert resolve_settings(negative, "qos").starvation_wait_s == 0
    qos = resolve_settings(SearchRequest(), "qos")
    assert qos == PROFILES["qos"][0]


@pytest.mark.parametrize("name", ["hcp19", "pcp20"])
def test_more_orders_find_the_shortest_job_first_plan(name: str) -> None:
    # One node, each job takes all of it. The old long job `a` comes first in priority order
    # ((t - q + d) / d = 11 against 1) and in submit order; shortest-job-first runs the two new
    # short jobs before it: slowdowns 1 + 2 + 11.2 = 14.2 against 11 + 11 + 12 = 34.
    snap = Snapshot(T, (node(0, cores=8),), (), (
        queued("a", 8, 100, submit=T - 1000), queued("b", 8, 10, submit=T),
        queued("c", 8, 10, submit=T),
    ))
    problem = problem_of(snap)
    dispatcher = BY_NAME[name]
    assert isinstance(dispatcher, CpDispatcher)
    jobs = problem.jobs
    _, two = dispatcher.heuristic_plan(problem, jobs, None, False)
    plan, five = dispatcher.heuristic_plan(problem, jobs, None, False, more_orders=True)
    assert two == pytest.approx(34.0)
    assert five == pytest.approx(14.2)
    first = min(plan.start_offsets, key=lambda i: (plan.start_offsets[i], i))
    assert problem.jobs[first].id in {"b", "c"}
