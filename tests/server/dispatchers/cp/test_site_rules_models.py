"""A site's rules inside each CP model (issue #50, item 2), at the model level: PCP'20's unit
positions y[i][r][k] lie in the segments of the job's start-now nodes, PCP'19 has c[i][n] only
on E_i and plans no run into a window, HCP'19 holds each eligibility class's capacity and
allocates on E_i; and the objective's priority weights w_i, which leave the papers' objective
(and so the decision) as it is when every priority is equal."""

from __future__ import annotations

import dataclasses
import time

from ortools.sat.python import cp_model

from hpcdispatch.server.dispatchers import BY_NAME
from hpcdispatch.server.dispatchers.base import SearchControl
from hpcdispatch.server.dispatchers.cp.cp_schedule import priority_weights
from hpcdispatch.server.dispatchers.cp.formulation import Formulation, ModelInputs
from hpcdispatch.server.dispatchers.cp.hcp19 import Hcp19Formulation
from hpcdispatch.server.dispatchers.cp.pcp19 import Pcp19Formulation
from hpcdispatch.server.dispatchers.cp.pcp20 import Pcp20Formulation
from hpcdispatch.server.dispatchers.planning.greedy_schedule import greedy_schedule
from hpcdispatch.server.dispatchers.planning.plan import Plan
from hpcdispatch.server.dispatchers.planning.problem import Problem
from hpcdispatch.snapshot import Node, NodeState, QueuedJob, Snapshot, UnavailabilityWindow
from tests.instances import FAST, T, problem_of, queued

# Four idle 4-core nodes: n0, n1 in "cpu"; n2, n3 in "gpu", n3 alone with "nvlink".
NODES = tuple(Node(f"n{i}", NodeState.UP, {"core": 4}, ("cpu",) if i < 2 else ("gpu",),
                   ("nvlink",) if i == 3 else ()) for i in range(4))


def _problem(jobs: tuple[QueuedJob, ...], windows: tuple[UnavailabilityWindow, ...] = ()
             ) -> Problem:
    return problem_of(Snapshot(T, NODES, (), jobs, windows))


def _formulation(kind: type[Formulation], problem: Problem) -> Formulation:
    jobs = problem.jobs_by_slowdown()
    heuristic = greedy_schedule(problem, jobs, kind is not Hcp19Formulation)
    return kind(ModelInputs(problem, jobs, heuristic))


def _solve(formulation: Formulation) -> dict[int, int]:
    """s_i - t of every job in an optimal solution."""
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    assert solver.solve(formulation.model) == cp_model.OPTIMAL
    return {j.index: solver.value(s)
            for j, s in zip(formulation.schedule.jobs, formulation.schedule.start_vars,
                            strict=True)}


def test_pcp20_positions_lie_in_the_segments_of_eligible_nodes() -> None:
    """The nvlink job's units may only sit on n3's segment of the core line, the cpu job's
    only on n0's and n1's; the unrestricted job's anywhere."""
    problem = _problem((dataclasses.replace(queued("nv", 2, 100, units=2),
                                            required_features=("nvlink",)),
                        dataclasses.replace(queued("cpu", 4, 100), partitions=("cpu",)),
                        queued("any", 4, 100)))
    formulation = _formulation(Pcp20Formulation, problem)
    assert isinstance(formulation, Pcp20Formulation)
    core = problem.resources.index("core")
    segment = {n: range(formulation.lines.base[core][n],
                        formulation.lines.base[core][n] + 4) for n in range(4)}

    def nodes_of(job: int) -> set[int]:
        found = set()
        for unit in formulation.y[job]:
            flat = list(formulation.model.proto.variables[unit[core].index].domain)
            for low, high in zip(flat[::2], flat[1::2], strict=True):
                found |= {n for n, seg in segment.items() if low in seg or high in seg}
        return found

    assert nodes_of(0) == {3}
    assert nodes_of(1) == {0, 1}
    assert nodes_of(2) == {0, 1, 2, 3}


def test_pcp20_positions_leave_the_nodes_of_a_window_the_job_would_run_into() -> None:
    problem = _problem((queued("long", 4, 300), queued("short", 4, 50)),
                       (UnavailabilityWindow(("n0", "n1", "n2"), T + 100, T + 900),))
    formulation = _formulation(Pcp20Formulation, problem)
    assert isinstance(formulation, Pcp20Formulation)
    core = problem.resources.index("core")
    n3 = formulation.lines.base[core][3]
    for unit in formulation.y[0]:  # "long" (300 s): n3 only
        flat = list(formulation.model.proto.variables[unit[core].index].domain)
        assert n3 <= min(flat) and max(flat) < n3 + 4


def test_pcp19_counts_exist_only_on_eligible_nodes() -> None:
    problem = _problem((dataclasses.replace(queued("nv", 4, 100),
                                            required_features=("nvlink",)),
                        dataclasses.replace(queued("cpu", 4, 100), partitions=("cpu",)),
                        queued("any", 4, 100)))
    formulation = _formulation(Pcp19Formulation, problem)
    assert isinstance(formulation, Pcp19Formulation)
    assert set(formulation.count[0]) == {3}
    assert set(formulation.count[1]) == {0, 1}
    assert set(formulation.count[2]) == {0, 1, 2, 3}


def test_pcp19_plans_no_later_run_into_a_window_on_its_nodes() -> None:
    """E_i = {n3} under maintenance over [t + 100, t + 900): a 300 s job neither starts now
    nor ends inside it; it is planned from t + 900 on."""
    problem = _problem((dataclasses.replace(queued("nv", 4, 300),
                                            required_features=("nvlink",)),),
                       (UnavailabilityWindow(("n3",), T + 100, T + 900),))
    formulation = _formulation(Pcp19Formulation, problem)
    assert _solve(formulation)[0] >= 900


def test_hcp19_holds_each_eligibility_class_and_allocates_on_it() -> None:
    """Two whole-node nvlink jobs share n3: pooled over the system both start at t, within
    their class only one does; the one that starts is placed on n3."""
    nv = dataclasses.replace(queued("nv", 4, 100), required_features=("nvlink",))
    problem = _problem((nv, dataclasses.replace(nv, id="nv2", submit_time=T - 50)))
    formulation = _formulation(Hcp19Formulation, problem)
    starts = _solve(formulation)
    assert sorted(starts.values()) == [0, 100]
    placed = formulation.allocate(Plan(starts), first_fit=False)
    assert list(placed.values()) == [[3]]


def test_priority_weights_are_bounded_and_all_one_when_priorities_are_equal() -> None:
    jobs = _problem(tuple(dataclasses.replace(queued(f"j{k}", 4, 100), priority=p)
                          for k, p in enumerate((5, 1, 9, 5)))).jobs
    assert priority_weights(jobs) == {0: 1.5, 1: 1.0, 2: 2.0, 3: 1.5}
    same = [dataclasses.replace(j, priority=7) for j in jobs]
    assert set(priority_weights(same).values()) == {1.0}


def test_equal_priorities_give_the_decision_without_priorities() -> None:
    """Every model, on a loaded system: the objective's integer weights and the decision are
    the same with every priority 7 as with none."""
    def jobs(priority: int) -> tuple[QueuedJob, ...]:
        return tuple(dataclasses.replace(queued(f"j{i}", 2 + i % 3, 100 + 10 * i,
                                                units=1 + i % 3), priority=priority)
                     for i in range(12))

    for name in ("hcp19", "pcp19", "pcp20"):
        decisions = []
        for priority in (0, 7):
            problem = _problem(jobs(priority))
            settings = dataclasses.replace(FAST, deterministic=True)
            outcome = BY_NAME[name].decide(problem, SearchControl(settings,
                                                                   time.monotonic() + 60))
            kind = {"hcp19": Hcp19Formulation, "pcp19": Pcp19Formulation,
                    "pcp20": Pcp20Formulation}[name]
            objective = list(_formulation(kind, problem).model.proto.objective.coeffs)
            decisions.append((outcome.placements, outcome.status, objective))
        assert decisions[0] == decisions[1], name
