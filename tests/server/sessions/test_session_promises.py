"""A session keeps with its jobs the promises its decisions report (issue #42): the next
decision finds each job's latest promise, not the one it was submitted with."""

from __future__ import annotations

from hpcdispatch.server.sessions.state import SessionState
from hpcdispatch.snapshot import Node, NodeState, QueuedJob, Snapshot


def queued(job_id: str, promised: int | None = None, token: str = "") -> QueuedJob:
    return QueuedJob(id=job_id, user="u", name="n", queue="q", submit_time=0, units=1,
                     unit_request={"core": 1}, requested_time=60, promised_start=promised,
                     promise_token=token)


def test_the_state_holds_the_latest_promise_of_each_job_in_its_place() -> None:
    state = SessionState("c", Snapshot(10, (Node("n", NodeState.UP, {"core": 4}),), (), (
        queued("a"), queued("b", 900, "1.old"), queued("c"))))
    state.hold_promises([("b", 500, "1.new"), ("a", 700, "1.a"), ("gone", 1, "1.x")])
    jobs = state.snapshot(0, None).queued  # type: ignore[arg-type]  # no running job to predict
    assert [(j.id, j.promised_start, j.promise_token) for j in jobs] == [
        ("a", 700, "1.a"), ("b", 500, "1.new"), ("c", None, "")]
