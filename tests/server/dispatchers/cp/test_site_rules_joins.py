"""The joins of a site's rules between the planner side and the CP side (issue #50): the CP
dispatchers' head reservation is for the first blocked job in the workload manager's priority
order (`by_priority`, submit order within equal priority), and EASY's head discipline inside a
CP decision (`oldest_that_fit`, one step for both) serves that order on each job's start-now
nodes."""

from __future__ import annotations

import dataclasses

from hpcdispatch.server.dispatchers import BY_NAME
from hpcdispatch.server.dispatchers.cp.cp_dispatch import CpDispatcher
from hpcdispatch.server.dispatchers.planning.job_selection import select_for_model
from hpcdispatch.server.dispatchers.planning.oldest_first import oldest_that_fit
from hpcdispatch.snapshot import Node, NodeState, QueuedJob, Snapshot
from tests.instances import FAST, T, node, problem_of, queued, running

PROTECT = dataclasses.replace(FAST, protect_head=True)
# n0, n1 in "cpu"; n2, n3 in "gpu", n3 alone with "nvlink"; four cores each.
RULED = tuple(Node(f"n{i}", NodeState.UP, {"core": 4}, ("cpu",) if i < 2 else ("gpu",),
                   ("nvlink",) if i == 3 else ()) for i in range(4))


def _with_priority(job: QueuedJob, priority: int) -> QueuedJob:
    return dataclasses.replace(job, priority=priority)


def _head_of(name: str, jobs: tuple[QueuedJob, ...]) -> str:
    """The job the CP dispatcher `name` reserves for on one 4-core node, half busy for 100 s."""
    problem = problem_of(Snapshot(T, (node(0),), (running("r", "n0", 2, ends_in=100),), jobs))
    dispatcher = BY_NAME[name]
    assert isinstance(dispatcher, CpDispatcher)
    reservation = dispatcher.head_reservation(problem, select_for_model(problem, 100), PROTECT)
    assert reservation is not None
    return reservation.job.id


def test_the_head_reservation_is_for_the_highest_priority_blocked_job() -> None:
    """Two blocked 4-core jobs: the older one of priority 0, the younger of priority 5; the
    reservation is the younger's (on main: the older's, by submit time alone). PCP'19's model
    holds no head reservation (`protects_head`)."""
    for name in ("pcp20", "hcp19"):
        jobs = (_with_priority(queued("old", 4, 100, submit=T - 90), 0),
                _with_priority(queued("urgent", 4, 100, submit=T - 50), 5),
                queued("small", 2, 50, submit=T - 10))
        assert _head_of(name, jobs) == "urgent", name


def test_the_head_reservation_is_the_oldest_blocked_job_within_equal_priority() -> None:
    for priority in (0, 3):
        jobs = (_with_priority(queued("young", 4, 100, submit=T - 50), priority),
                _with_priority(queued("old", 4, 100, submit=T - 90), priority))
        assert _head_of("pcp20", jobs) == "old"


def test_the_oldest_that_fit_start_on_their_nodes_and_one_kept_off_them_is_the_head() -> None:
    """n3, the only nvlink node, is busy. In queue order a cpu job and an unrestricted one
    start on their nodes (on main the step without rules placed them anywhere free); the
    nvlink job fits what is free (a node of n0..n2) but not where its rules allow, so it is
    the head, as EASY's, and holds the reservation: when it is the oldest, nothing starts
    before it (the model then backfills around its reservation)."""
    nv = dataclasses.replace(queued("nv", 4, 100, submit=T - 70), required_features=("nvlink",))
    cpu = dataclasses.replace(queued("cpu", 4, 100, submit=T - 90), partitions=("cpu",))
    anywhere = queued("any", 4, 100, submit=T - 80)
    busy = (running("r", "n3", 4, ends_in=100),)

    def first(*jobs: QueuedJob) -> dict[str, set[str]]:
        problem = problem_of(Snapshot(T, RULED, busy, jobs))
        ids = {j.index: j.id for j in problem.jobs}
        return {ids[i]: {problem.node_ids[n] for n in nodes}
                for i, nodes in oldest_that_fit(problem, first_fit=False).items()}

    started = first(cpu, anywhere, nv)
    assert set(started) == {"cpu", "any"}
    assert started["cpu"] <= {"n0", "n1"}
    assert started["any"] <= {"n0", "n1", "n2"}
    assert first(dataclasses.replace(nv, submit_time=T - 95), cpu, anywhere) == {}


def test_the_oldest_that_fit_are_served_in_priority_order() -> None:
    """Room for one 4-core job: the younger of higher priority starts (EASY's queue order),
    and with equal priorities the older, as before."""
    def first(priorities: tuple[int, int]) -> set[str]:
        jobs = (_with_priority(queued("old", 4, 100, submit=T - 90), priorities[0]),
                _with_priority(queued("young", 4, 100, submit=T - 50), priorities[1]))
        problem = problem_of(Snapshot(T, (node(0),), (), jobs))
        ids = {j.index: j.id for j in problem.jobs}
        return {ids[i] for i in oldest_that_fit(problem, first_fit=False)}

    assert first((0, 0)) == {"old"}
    assert first((2, 2)) == {"old"}
    assert first((0, 5)) == {"young"}


def test_the_window_takes_the_highest_priority_jobs_first() -> None:
    """A window of 2 on an idle 16-core node, three 4-core jobs that fit now: the two that have
    waited longest without priorities (or with equal ones); the young job of priority 5 and
    the oldest other with priorities, held in slowdown order (on main: the two oldest, the
    young job OUTSIDE_WINDOW)."""
    def window(priorities: tuple[int, int, int]) -> list[str]:
        jobs = tuple(_with_priority(queued(f"j{k}", 4, 100, submit=T - 300 + 100 * k), p)
                     for k, p in enumerate(priorities))
        problem = problem_of(Snapshot(T, (node(0, cores=16),), (), jobs))
        return [j.id for j in select_for_model(problem, 2).considered]

    assert window((0, 0, 0)) == ["j0", "j1"]
    assert window((4, 4, 4)) == ["j0", "j1"]
    assert window((0, 0, 5)) == ["j0", "j2"]  # slowdown order: j0 has waited longest
    assert window((1, 3, 2)) == ["j1", "j2"]
