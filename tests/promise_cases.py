"""A small cluster whose promises are easy to follow, for the tests of promised starts over gRPC
(issue #42): two 4-core nodes, `r` running on n0 until T + 1,000 (expected), and two waiting
jobs of the book profile, on its ladder's first rung (every job promised at arrival):

- A (both nodes, 1,000 s, waiting since T - 50): promised T + 1,000, when r ends;
- B (one node, 2,000 s, waiting since T - 10): it cannot end before A's promise, so it is
  promised T + 2,000, after A;
- E (both nodes, 1,000 s, submitted T - 20, before B) appears only when asked (`late_e`), as a
  job the caller saw late: planned from nothing, in submit order, A T + 1,000, E T + 2,000 and
  B T + 3,000; B's promise sent back keeps B at T + 2,000, and E goes after it.
"""

from __future__ import annotations

from collections.abc import Mapping

from hpcdispatch.v1 import dispatcher_pb2 as pb

T = 10_000
# (promised start, token) per job id, as an answer's expected starts give them.
Promises = Mapping[str, tuple[int, str]]


def request(t: int, cluster: str, promises: Promises | None = None, late_e: bool = False,
            r_runs: int = 1_100, r_requested: int | None = None) -> pb.DispatchRequest:
    """The snapshot at t on `cluster`, the `promises` sent back with their jobs; r expected to
    run `r_runs` seconds from T - 100 (its requested time `r_requested`, the same by default)."""
    message = pb.DispatchRequest(time=t, cluster=cluster, dispatcher=pb.DISPATCHER_PCP20,
                                 predictor=pb.PREDICTOR_WALLTIME)
    message.search.profile = "book"
    message.search.promise_after_s = 0  # the ladder's first rung: every job from its arrival
    for node in ("n0", "n1"):
        message.nodes.add(id=node, state=pb.NODE_STATE_UP, capacity={"core": 4})
    message.running_jobs.add(
        id="r", start_time=T - 100, requested_time=r_requested or r_runs,
        expected_duration=r_runs, units=[pb.UnitAllocation(node_id="n0", amounts={"core": 4})])
    jobs = [("A", T - 50, 2, 1_000), ("B", T - 10, 1, 2_000)]
    if late_e:
        jobs.insert(1, ("E", T - 20, 2, 1_000))
    for job_id, submit, units, seconds in jobs:
        job = message.queued_jobs.add(id=job_id, submit_time=submit, units=units,
                                      unit_request={"core": 4}, requested_time=seconds)
        start, token = (promises or {}).get(job_id, (None, ""))
        if start is not None:
            job.promised_start = start
        job.promise_token = token
    return message


def promises(response: pb.DispatchResponse) -> dict[str, tuple[int, str]]:
    """(promised start, token) of each promised job of the answer."""
    return {e.job_id: (e.start_time, e.promise_token)
            for e in response.report.expected_starts if e.promised}


def plan(response: pb.DispatchResponse) -> tuple[list[str], list[tuple[str, int, bool, int]]]:
    """What the answer decides, without tokens: the jobs that start now, and each waiting job's
    (id, expected start, promised, moved later by)."""
    return ([s.job_id for s in response.starts],
            sorted((e.job_id, e.start_time, e.promised, e.moved_later_seconds)
                   for e in response.report.expected_starts))
