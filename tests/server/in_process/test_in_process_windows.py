"""`InProcessSession.update` takes the unavailability windows as UpdateSession does (issue #50):
set, they replace the session's windows (an empty tuple clears them); None keeps them. On main
the method had no `windows` (the replay's backend set the state's windows behind its back)."""

from __future__ import annotations

from hpcdispatch.server.in_process import InProcessDecision, InProcessService
from hpcdispatch.snapshot import QueuedJob, UnavailabilityWindow
from hpcdispatch.v1 import dispatcher_pb2 as pb

T = 1_000


def _started(decision: InProcessDecision) -> dict[str, tuple[str, ...]]:
    return {s.job_id: s.nodes for s in decision.result.decision.starts}


def test_update_sets_keeps_and_clears_the_windows() -> None:
    request = pb.DispatchRequest(time=T, dispatcher=pb.DISPATCHER_EASY,
                                 predictor=pb.PREDICTOR_WALLTIME,
                                 nodes=[pb.Node(id=n, state=pb.NODE_STATE_UP,
                                                capacity={"core": 4}) for n in ("n1", "n2")])
    session = InProcessService().open(request)
    maintenance = (UnavailabilityWindow(("n1", "n2"), T + 10, T + 500),)

    def job(job_id: str) -> QueuedJob:
        return QueuedJob(job_id, "u", "", "", T - 5, 1, {"core": 4}, 600)

    session.update(T, (), (), [job("a")], (), maintenance)
    assert session.state.unavailability == maintenance
    assert _started(session.decide()) == {}  # its 600 s would run into the window

    session.update(T + 1, (), (), [job("b")], ())  # None: the window kept
    assert session.state.unavailability == maintenance
    assert _started(session.decide()) == {}

    named = (UnavailabilityWindow(("n2",), T, T + 5_000, name="R"),)
    session.update(T + 2, (), ("a", "b"),
                   [QueuedJob("r", "u", "", "", T, 1, {"core": 4}, 600, reservation="R")], (),
                   named)
    assert _started(session.decide()) == {"r": ("n2",)}  # inside R only

    session.update(T + 3, (), ("r",), [job("c")], (), ())  # cleared
    assert session.state.unavailability == ()
    assert set(_started(session.decide())) == {"c"}
