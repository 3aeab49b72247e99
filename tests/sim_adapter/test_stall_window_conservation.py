"""Work conservation on the stall window of issue #49 (lublin_256_est, whose users over-state
their run times, under the default predictor; the book once stalled there at t = 690,960 on
jobs 540-726): none of the ~400 decisions of the book's replay (pcp19 `book`, data-driven) leaves
a queued job waiting that fits now around its promises, and at the two decision points with the
longest queues every built-in dispatcher under every profile conserves work by its own
definition (tests/conservation_cases.py), over gRPC. Checked independently of the dispatchers'
code (tests/work_conservation_check.py). On main one decision of this replay left a job waiting
(t = 494,947, job 563: the model's plan of an unpromised job held the room)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hpcdispatch.client import DispatcherClient
from hpcdispatch.server.domain.profiles import PROFILES
from hpcdispatch.server.rpc.app import RunningServer
from hpcdispatch.sim_adapter.adapter import DispatchSettings
from hpcdispatch.sim_adapter.backend import Answer, StateChange
from hpcdispatch.sim_adapter.in_process_backend import InProcessBackend, LocalService
from hpcdispatch.sim_adapter.replay import RunSpec, replay, resolve_trace
from hpcdispatch.snapshot import Snapshot
from hpcdispatch.v1 import dispatcher_pb2 as pb
from tests.conservation_cases import every_case, holes_in, request_of
from tests.work_conservation_check import Promise, idle_holes

LUBLIN_EST = resolve_trace("lublin-256-est")
WINDOW = range(500, 740)  # the records around the first stall of records 0:1500
CASES = every_case(tuple(PROFILES))


class Recording(InProcessBackend):
    """The in-process backend, keeping every decision's whole snapshot and answer."""

    seen: list[tuple[Snapshot, Answer]]

    def decide(self, change: StateChange, whole: Callable[[], Snapshot]) -> Answer:
        answer = super().decide(change, whole)
        self.seen.append((whole(), answer))
        return answer


class RecordingService(LocalService):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[Snapshot, Answer]] = []

    def backend(self, template: pb.DispatchRequest) -> InProcessBackend:
        backend = Recording(self.service, template)
        backend.seen = self.seen
        return backend


@pytest.fixture(scope="module")
def book_replay(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Snapshot, Answer]]:
    service = RecordingService()
    spec = RunSpec(LUBLIN_EST, DispatchSettings(dispatcher="pcp19", predictor="data-driven",
                                                profile="book"), records=WINDOW)
    summary = replay(spec, service, tmp_path_factory.mktemp("stall-window"))  # a stall raises
    assert summary["jobs"] == len(WINDOW) and summary["fallback_decisions"] == 0
    return service.seen


def longest_queues(seen: list[tuple[Snapshot, Answer]], count: int,
                   ) -> list[tuple[Snapshot, Answer]]:
    """The `count` decisions with the longest queues (the latest first among equals)."""
    return sorted(seen, key=lambda s: (-len(s[0].queued), -s[0].time))[:count]


def test_the_books_replay_never_leaves_a_job_waiting_that_fits_around_its_promises(
    book_replay: list[tuple[Snapshot, Answer]],
) -> None:
    found = {}
    for snap, answer in book_replay:
        starts = {s.job_id: s.nodes for s in answer.decision.starts}
        promises = [Promise(e.job_id, e.start) for e in answer.expected_starts if e.promised]
        holes = idle_holes(snap, starts, promises)
        if holes:
            found[snap.time] = holes
    assert found == {}, f"{len(found)} of {len(book_replay)} decisions left jobs waiting"


def test_every_dispatcher_conserves_work_at_the_windows_longest_queues(
    book_replay: list[tuple[Snapshot, Answer]], server: RunningServer,
) -> None:
    longest = longest_queues(book_replay, 2)
    found = {}
    with DispatcherClient(server.target, timeout=120) as client:
        for snap, _ in longest:
            for dispatcher, profile in CASES:
                answer = client.dispatch(request_of(snap, dispatcher, profile))
                holes = holes_in(snap, answer, dispatcher, profile)
                if holes:
                    found[(snap.time, dispatcher, profile)] = holes
    assert found == {}


def test_the_decision_points_are_busy_with_long_queues(
    book_replay: list[tuple[Snapshot, Answer]],
) -> None:
    # What the two tests above ran on: hundreds of decisions, some with long queues.
    assert len(book_replay) >= 300
    for snap, _ in longest_queues(book_replay, 2):
        assert len(snap.queued) >= 15 and snap.running
