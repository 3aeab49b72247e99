"""The predictors' knowledge base behind the gRPC service survives a server restart."""

from __future__ import annotations

from pathlib import Path

from hpcdispatch.client import DispatcherClient
from hpcdispatch.server.config import ServerConfig
from hpcdispatch.server.rpc.app import start_server
from hpcdispatch.v1 import dispatcher_pb2 as pb

CLUSTER = "restart-test"
REQUESTED = 3_600


def completion(job_id: str, user: str, run_time: int, end_time: int) -> pb.JobCompletion:
    return pb.JobCompletion(
        job_id=job_id, user=user, name="app", queue="batch", units=1,
        unit_request={"core": 1}, requested_time=REQUESTED,
        start_time=end_time - run_time, end_time=end_time,
    )


def expected_durations(store: str) -> dict[str, int]:
    """Start a server on the store, ask FCFS with LAST_TWO for one job per user, stop it."""
    running = start_server(ServerConfig(listen="127.0.0.1:0", predictor_store=store))
    try:
        with DispatcherClient(f"127.0.0.1:{running.port}", timeout=120) as client:
            request = pb.DispatchRequest(
                time=20_000,
                cluster=CLUSTER,
                dispatcher=pb.DISPATCHER_FCFS,
                predictor=pb.PREDICTOR_LAST_TWO,
                nodes=[pb.Node(id="n0", state=pb.NODE_STATE_UP, capacity={"core": 8})],
                queued_jobs=[
                    pb.QueuedJob(
                        id=f"q-{user}", user=user, name="app", queue="batch", submit_time=19_000,
                        units=1, unit_request={"core": 1}, requested_time=REQUESTED,
                    )
                    for user in ("alice", "bob", "nobody")
                ],
            )
            response = client.dispatch(request)
            return {start.job_id: start.expected_duration for start in response.starts}
    finally:
        running.stop(1.0)


def report(store: str, completions: list[pb.JobCompletion]) -> int:
    running = start_server(ServerConfig(listen="127.0.0.1:0", predictor_store=store))
    try:
        with DispatcherClient(f"127.0.0.1:{running.port}", timeout=120) as client:
            return client.report_completions(completions, cluster=CLUSTER)
    finally:
        running.stop(1.0)


def test_last_two_predictions_survive_a_server_restart(tmp_path: Path) -> None:
    store = str(tmp_path / "predictors.sqlite")
    history = [
        completion("a1", "alice", 100, 11_000),
        completion("a2", "alice", 300, 13_000),
        completion("a3", "alice", 3_000, 10_000),  # reported last, but ended first
        completion("b1", "bob", 50, 14_000),
    ]
    assert report(store, history) == len(history)
    # A new server process on the same store: a fresh registry reading the same file.
    durations = expected_durations(store)
    assert durations == {"q-alice": 200, "q-bob": 50, "q-nobody": REQUESTED}
    # A restart and a retried report change nothing; new completions go on from the history.
    assert report(store, [history[0], completion("a4", "alice", 700, 15_000)]) == 2
    assert expected_durations(store)["q-alice"] == 500
