"""The planning problem's per-job node masks and windows (issue #50, planning/eligibility.py):
E_i from partitions and features, the start-now mask less the windows a job would run into, the
windows as data relative to t, and nothing at all for a snapshot without rules."""

from __future__ import annotations

import dataclasses

from hpcdispatch.server.dispatchers.planning.job_selection import never_fits
from hpcdispatch.snapshot import Node, Snapshot, UnavailabilityWindow
from tests.instances import T, node, problem_of, queued


def labelled(i: int, partitions: tuple[str, ...], features: tuple[str, ...] = ()) -> Node:
    return dataclasses.replace(node(i), partitions=partitions, features=features)


NODES = (labelled(0, ("cpu",)), labelled(1, ("cpu",), ("ib",)), labelled(2, ("gpu",), ("ib",)),
         node(3))


def test_no_rules_no_masks() -> None:
    problem = problem_of(Snapshot(T, NODES, (), (queued("a", 1, 100),),
                                  (UnavailabilityWindow(("n0",), T - 100, T),)))
    assert problem.eligibility is None  # the window ended at t


def test_masks_and_windows() -> None:
    jobs = (dataclasses.replace(queued("cpu", 1, 100), partitions=("cpu",)),
            dataclasses.replace(queued("ib", 1, 100), required_features=("ib",)),
            dataclasses.replace(queued("both", 1, 100), partitions=("cpu", "gpu"),
                                required_features=("ib",)),
            queued("short", 1, 50), queued("long", 1, 500),
            dataclasses.replace(queued("alice", 1, 500), user="alice"),
            dataclasses.replace(queued("nowhere", 1, 100), partitions=("bigmem",)))
    windows = (UnavailabilityWindow(("n1", "n3"), T + 100, T + 200),
               UnavailabilityWindow(("n0",), T - 10, T + 1000, users=("alice",)))
    problem = problem_of(Snapshot(T, NODES, (), jobs, windows))
    masks = problem.eligibility
    assert masks is not None
    assert masks.nodes == {0: {0, 1}, 1: {1, 2}, 2: {1, 2}, 6: frozenset()}
    assert [(sorted(w.nodes), w.start, w.end, set(w.users)) for w in masks.windows] == [
        ([1, 3], 100, 200, set()), ([0], -10, 1000, {"alice"})]

    def now(job: int) -> set[int]:
        mask = masks.now(job)
        return {n for n in range(4) if mask is None or n in mask}

    assert now(0) == {0, 1} - {0}  # "cpu" runs into alice's reservation on n0 from t
    assert now(3) == {1, 2, 3}  # 50 s: ends before the maintenance, not in alice's window
    assert now(4) == {2}  # 500 s: into the maintenance on n1 and n3 and alice's n0
    assert now(5) == {0, 2}  # alice: her reservation admits her
    assert [never_fits(problem, job) for job in problem.jobs] == [False] * 6 + [True]
