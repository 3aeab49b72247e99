"""Work conservation per dispatcher (issue #49), as docs/dispatchers.md, *What each dispatcher
guarantees*, defines it: each dispatcher is checked against its own promises
(tests/work_conservation_check.py), from its answer over the wire.

- `fcfs`: its order is its guarantee: the oldest job that did not start does not fit now;
- the EASY family (`easy`, `easy-*` orders, `los`, `easy-k`): the reservations it reports (the
  head's, EASY-k's first k), promised or estimated;
- `conservative`: every reservation it reports;
- the CP dispatchers under the promise book (`book`): the promises it reports;
- the CP dispatchers under every other profile: their plan is their guarantee and it is not
  reported, so what is checked is that the machine is never left idle: something runs once
  the answer's jobs start, or no queued job fits now.
"""

from __future__ import annotations

from hpcdispatch.catalog import CP_DISPATCHER_NAMES, DISPATCHER_NAMES
from hpcdispatch.proto_convert import snapshot_to_pb
from hpcdispatch.snapshot import Snapshot
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.work_conservation_check import Promise, idle_holes

BOOK = "book"


def request_of(snapshot: Snapshot, dispatcher: str, profile: str = "") -> pb.DispatchRequest:
    """The snapshot as a Dispatch request to `dispatcher` (walltime: d_i is the requested
    time, so every reservation is planned at the limits), deterministic search limits."""
    request = pb.DispatchRequest(cluster=f"conservation-{dispatcher}-{profile}",
                                 dispatcher_name=dispatcher, predictor=pb.PREDICTOR_WALLTIME)
    snapshot_to_pb(snapshot, request)
    if dispatcher in CP_DISPATCHER_NAMES:
        request.search.profile = profile
        request.search.deterministic = True
        if profile != BOOK:  # checked only for idleness: the quickest search that decides
            request.search.delta_ms, request.search.delta_max_ms = 20, 40
            request.search.window = 20
    return request


def holes_in(snapshot: Snapshot, answer: pb.DispatchResponse, dispatcher: str,
             profile: str = "") -> list[str]:
    """The queued jobs `answer` leaves waiting although they fit now around its dispatcher's
    own promises (module docstring); [] when it conserves work by its own definition."""
    starts = {s.job_id: tuple(u.node_id for u in s.units) for s in answer.starts}
    if dispatcher == "fcfs":
        return idle_holes(snapshot, starts, in_order=True)
    if dispatcher in CP_DISPATCHER_NAMES and profile != BOOK:
        if snapshot.running or starts:
            return []
        return idle_holes(snapshot, starts)  # an idle machine: anything that fits is a hole
    promised = [Promise(e.job_id, e.start_time) for e in answer.report.expected_starts
                if e.promised or dispatcher not in CP_DISPATCHER_NAMES]
    return idle_holes(snapshot, starts, promised)


def every_case(profiles: tuple[str, ...]) -> list[tuple[str, str]]:
    """(dispatcher, profile) of every built-in dispatcher, the CP ones under each profile."""
    names = list(DISPATCHER_NAMES)  # the contract's, in enum order
    return ([(n, "") for n in names if n not in CP_DISPATCHER_NAMES]
            + [(n, p) for n in CP_DISPATCHER_NAMES for p in profiles])
