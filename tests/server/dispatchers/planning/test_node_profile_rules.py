"""The planner with a site's rules (issue #50, planning/node_profile.py): job i's E_i and the
unavailability windows that do not admit it are read at every start tried (earliest, fits_at,
fits_on, place, take_all); a window is no hold for the jobs it admits; without rules every
verb answers as before (tests/server/dispatchers/planning/test_node_profile.py)."""

from __future__ import annotations

import dataclasses

from hpcdispatch.server.dispatchers.planning.node_profile import NodeProfile
from hpcdispatch.server.dispatchers.planning.problem import Problem
from hpcdispatch.snapshot import Node, QueuedJob, RunningJob, Snapshot, UnavailabilityWindow
from tests.instances import T, node, problem_of, queued, running


def labelled(i: int, partition: str) -> Node:
    return dataclasses.replace(node(i), partitions=(partition,))


NODES = (labelled(0, "cpu"), labelled(1, "cpu"), labelled(2, "gpu"), labelled(3, "gpu"))


def problem(jobs: tuple[QueuedJob, ...], windows: tuple[UnavailabilityWindow, ...] = (),
            busy: tuple[RunningJob, ...] = ()) -> Problem:
    return problem_of(Snapshot(T, NODES, busy, jobs, windows))


def test_a_restricted_job_starts_on_its_partition_only() -> None:
    """n0, n1 busy until t + 500; a cpu job's earliest start is then, on n0 or n1, though
    the gpu nodes are free now."""
    cpu_job = dataclasses.replace(queued("a", 4, 100), partitions=("cpu",))
    p = problem((cpu_job,), busy=(running("r0", "n0", 4, 500), running("r1", "n1", 4, 500)))
    profile = NodeProfile(p)
    job = p.jobs[0]
    assert not profile.fits_at(job, 0)
    assert not profile.fits_on(job, 0, [2])
    assert profile.earliest(job) == 500
    assert set(profile.place(job, 500)) <= {0, 1}


def test_a_window_holds_its_nodes_from_the_jobs_it_does_not_admit() -> None:
    """Every node under maintenance over [t + 50, t + 300): a 100 s job starts at its end; one
    of 40 s now; alice's job of 100 s, whom the window admits, now."""
    window = UnavailabilityWindow(tuple(n.id for n in NODES), T + 50, T + 300,
                                  users=("alice",))
    jobs = (queued("long", 4, 100), queued("short", 4, 40),
            dataclasses.replace(queued("alice", 4, 100), user="alice"))
    p = problem(jobs, (window,))
    profile = NodeProfile(p)
    long, short, alice = p.jobs
    assert not profile.fits_at(long, 0)
    assert profile.earliest(long) == 300
    assert profile.earliest(short) == 0
    assert profile.earliest(alice) == 0
    nodes = profile.place(alice, 0)
    assert not profile.fits_on(long, 0, nodes)


def test_a_window_on_some_nodes_leaves_the_others() -> None:
    window = UnavailabilityWindow(("n0", "n1", "n2"), T + 50, T + 300)
    p = problem((queued("long", 4, 100),), (window,))
    profile = NodeProfile(p)
    (long,) = p.jobs
    assert profile.earliest(long) == 0
    assert profile.place(long, 0) == [3]


def test_held_reservations_into_a_new_window_are_refused_together() -> None:
    """`take_all` refuses a set of holds one of which runs into a window that does not admit
    its job (a reservation kept from before the window appeared); alone, the others fit."""
    window = UnavailabilityWindow(("n0",), T + 50, T + 300)
    p = problem((queued("a", 4, 100), queued("b", 4, 100)), (window,))
    a, b = p.jobs
    profile = NodeProfile(p)
    profile.add_boundaries([0, 100, 400, 500])
    assert not profile.take_all([(0, a, [0]), (400, b, [1])])
    assert profile.take_all([(400, a, [0]), (0, b, [1])])


def test_no_rules_no_masks() -> None:
    p = problem((queued("a", 4, 100),))
    assert p.eligibility is None
    assert NodeProfile(p).usable(p.jobs[0], 0) is None


def test_rules_that_allow_every_node_are_no_rules() -> None:
    """One partition holding every node (what a Slurm bridge managing one partition sends):
    no masks, the dispatchers' paths without rules; a second partition makes them again."""
    one = tuple(labelled(i, "batch") for i in range(4))
    job = dataclasses.replace(queued("a", 2, 100), partitions=("batch",))
    assert problem_of(Snapshot(T, one, (), (job,))).eligibility is None
    two = (*one[:3], labelled(3, "other"))
    rules = problem_of(Snapshot(T, two, (), (job,))).eligibility
    assert rules is not None and rules.allowed(0) == frozenset({0, 1, 2})
