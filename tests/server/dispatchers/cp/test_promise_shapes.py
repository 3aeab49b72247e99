"""A job whose shape changed loses its promise openly (issue #51, item 1): its units, request or
requested time are what the promise was planned for, so the book makes it a new promise, says
why (`PromiseMove.SHAPE_CHANGED`) and by how much it is later; an older promise keeps its start.
Over gRPC, with tokens and replicas: tests/server/rpc/test_promise_replicas.py."""

from __future__ import annotations

import dataclasses

from hpcdispatch.server.dispatchers.base import Outcome, PromiseMove
from hpcdispatch.server.dispatchers.cp.pcp20 import Pcp20Dispatcher
from hpcdispatch.snapshot import QueuedJob, Snapshot
from tests.instances import problem_of
from tests.server.dispatchers.cp.test_promise_book import control, job, nodes, promises_of, runs

T = 10_000


def cluster(t: int, a: QueuedJob | None = None, b: QueuedJob | None = None) -> Snapshot:
    """tests/promise_cases.py's case: r on n0 until T + 1,000; A (both nodes, 1,000 s) promised
    T + 1,000, B (one node, 2,000 s) T + 2,000, after it."""
    return Snapshot(t, nodes(2), (runs("r", T - 100, ["n0"], 1100),),
                    (a or job("A", T - 50, 2, 1000), b or job("B", T - 10, 1, 2000)))


def reasons(snapshot: Snapshot, outcome: Outcome) -> dict[str, tuple[PromiseMove, int]]:
    """Why each promise moved and by how much later (0: not later), by job id."""
    return {snapshot.queued[i].id: (why, outcome.promises_moved.get(i, 0))
            for i, why in outcome.promise_move_reasons.items()}


def test_a_newer_job_grown_to_two_units_is_promised_anew_and_the_older_promise_stays() -> None:
    """The issue's second case: the book holds A at T + 1,000 and B at T + 2,000; B comes back
    with 2 units. Before, B kept its promise as a 1-unit one and moved before A, which moved to
    T + 3,000, reported moved 0. Now B is promised anew after A, SHAPE_CHANGED."""
    for retry in (True, False):  # at T again (the book starts from what T began with: no
        # promise), and at T + 60 (it holds both)
        dispatcher = Pcp20Dispatcher()
        first = cluster(T)
        assert promises_of(first, dispatcher.decide(problem_of(first), control())) == {
            "A": T + 1000, "B": T + 2000}
        grown = cluster(T if retry else T + 60, b=job("B", T - 10, 2, 2000))
        outcome = dispatcher.decide(problem_of(grown), control())
        assert promises_of(grown, outcome) == {"A": T + 1000, "B": T + 2000}
        assert not outcome.placements and not outcome.promises_moved
        assert reasons(grown, outcome) == ({} if retry else {
            "B": (PromiseMove.SHAPE_CHANGED, 0)})


def test_an_older_job_that_asks_for_longer_is_promised_later_and_says_by_how_much() -> None:
    """A asks for 1,500 s instead of 1,000: it no longer holds a promise, so B's (kept) moves
    earlier into the room, B starts now, and A's new promise, after B, is 1,060 s later than the
    old one: said, SHAPE_CHANGED."""
    dispatcher = Pcp20Dispatcher()
    first = cluster(T)
    dispatcher.decide(problem_of(first), control())
    longer = cluster(T + 60, a=job("A", T - 50, 2, 1500))
    outcome = dispatcher.decide(problem_of(longer), control())
    assert promises_of(longer, outcome) == {"A": T + 2060}
    assert {longer.queued[i].id for i in outcome.placements} == {"B"}
    assert reasons(longer, outcome) == {"A": (PromiseMove.SHAPE_CHANGED, 1060)}


def test_a_promise_the_edge_found_signed_for_another_shape_is_reported_where_no_book_holds_it(
) -> None:
    """A replica that made neither promise: the edge found A's token real but made for another
    shape (`QueuedJob.reshaped_promise`), B's believed. A is promised anew, B starts now, and
    A's move is reported, SHAPE_CHANGED."""
    longer = cluster(T + 60, a=dataclasses.replace(job("A", T - 50, 2, 1500),
                                                   reshaped_promise=T + 1000),
                     b=dataclasses.replace(job("B", T - 10, 1, 2000), promised_start=T + 2000))
    outcome = Pcp20Dispatcher().decide(problem_of(longer), control())
    assert promises_of(longer, outcome) == {"A": T + 2060}
    assert reasons(longer, outcome) == {"A": (PromiseMove.SHAPE_CHANGED, 1060)}
