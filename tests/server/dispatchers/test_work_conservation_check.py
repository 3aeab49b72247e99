"""The work-conservation checker (tests/work_conservation_check.py) on hand cases: it reports a
job left waiting that fits now around every promise, and only such a job (a report is always a
real idle hole: a pooled promise must be shown to fit with the job in place)."""

from __future__ import annotations

from hpcdispatch.snapshot import NodeState, Snapshot
from tests.instances import T, node, queued, running
from tests.work_conservation_check import Promise, idle_holes

# n1 busy until T + 100 (its requested time), n2 free; "wide" needs both nodes.
WIDE = queued("wide", 4, 1_000, submit=T - 300, units=2)
BUSY = (running("r", "n1", 4, 100),)


def snap(*queue: object, nodes: tuple[object, ...] = (node(1), node(2))) -> Snapshot:
    return Snapshot(T, nodes, BUSY, queue)  # type: ignore[arg-type]


def test_a_job_that_fits_and_touches_no_promise_is_a_hole() -> None:
    short = queued("short", 4, 50)
    assert idle_holes(snap(WIDE, short), {}, [Promise("wide", T + 100)]) == ["short"]
    # Started, it is no hole; nor is a job that fits nowhere now.
    assert idle_holes(snap(WIDE, short), {"short": ("n2",)}, [Promise("wide", T + 100)]) == []
    assert idle_holes(snap(queued("big", 8, 50)), {}) == []


def test_a_job_running_into_a_promise_is_no_hole() -> None:
    long = queued("long", 4, 5_000)  # on n2 past T + 100, where "wide" needs n2
    assert idle_holes(snap(WIDE, long), {}, [Promise("wide", T + 100)]) == []
    assert idle_holes(snap(WIDE, long), {}) == ["long"]  # without the promise it is one


def test_a_pooled_promise_with_room_elsewhere_leaves_a_hole() -> None:
    # Three nodes: with "long" on n2, "wide" still fits from T + 100 on n1 and n3; "wide"
    # itself fits now on n2 and n3 (its own promise is no room it must leave).
    nodes = (node(1), node(2), node(3))
    long = queued("long", 4, 5_000)
    assert idle_holes(snap(WIDE, long, nodes=nodes), {},
                      [Promise("wide", T + 100)]) == ["wide", "long"]
    # Reported on n2 and n3, the promise leaves "long" no node until T + 5,000.
    reported = Promise("wide", T + 100, ("n2", "n3"))
    assert idle_holes(snap(WIDE, long, nodes=nodes), {}, [reported]) == ["wide"]


def test_fcfs_is_asked_only_for_its_oldest_waiting_job() -> None:
    short = queued("short", 4, 50)
    assert idle_holes(snap(WIDE, short), {}, in_order=True) == []  # "wide" cannot start
    older = queued("older", 4, 50, submit=T - 400)
    assert idle_holes(snap(WIDE, older), {}, in_order=True) == ["older"]


def test_down_nodes_and_jobs_that_never_fit_are_left_alone() -> None:
    down = (node(1), node(2, state=NodeState.DOWN))
    assert idle_holes(snap(queued("short", 4, 50), nodes=down), {}) == []
    assert idle_holes(snap(queued("huge", 4, 50, units=9)), {}) == []
