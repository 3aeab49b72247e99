"""Work conservation as a checked property (issue #49): on random busy synthetic snapshots, no
built-in dispatcher, under any profile, leaves a queued job waiting that fits now for its
requested time without touching one of its own promises (tests/conservation_cases.py says what
each dispatcher's promises are; tests/work_conservation_check.py checks, independently of the
dispatchers' code). Every decision through a real gRPC server on loopback.

On main the promise book left such jobs waiting (its model planned them later, and the plan of
an unpromised job held room as if it were a promise): 7 of these 16 snapshots under hcp19
`book`, 4 under pcp20 `book`."""

from __future__ import annotations

import pytest

from hpcdispatch.client import DispatcherClient
from hpcdispatch.server.domain.profiles import PROFILES
from hpcdispatch.server.rpc.app import RunningServer
from hpcdispatch.snapshot import Snapshot
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import NodeGroup, System
from tests.conservation_cases import BOOK, every_case, holes_in, request_of

SYSTEMS = (
    System("thin16", (NodeGroup("n", 16, {"core": 8, "mem": 32_768}),)),
    System("mixed32", (NodeGroup("c", 24, {"core": 16, "mem": 65_536}),
                       NodeGroup("g", 8, {"core": 16, "mem": 65_536, "gpu": 2}))),
)
# (system, queued, seed): busy (80 % of the cores run), short and long queues.
SNAPSHOTS = [(s, q, seed) for s in SYSTEMS for q in (10, 40) for seed in range(4)]
CASES = every_case(tuple(PROFILES))


def snapshot(system: System, queued: int, seed: int) -> Snapshot:
    return synthetic_snapshot(system, queued=queued, busy=0.8, seed=seed)


@pytest.fixture(scope="module")
def wire(server: RunningServer) -> DispatcherClient:
    with DispatcherClient(server.target, timeout=120) as client:
        yield client


@pytest.mark.parametrize(("dispatcher", "profile"), CASES,
                         ids=[f"{d}-{p}" if p else d for d, p in CASES])
def test_no_answer_leaves_a_job_waiting_that_fits_around_its_promises(
    dispatcher: str, profile: str, wire: DispatcherClient,
) -> None:
    # The book is checked on every snapshot; the other CP profiles (checked for idleness
    # only) on the short queues.
    chosen = [c for c in SNAPSHOTS if profile in ("", BOOK) or c[1] == 10]
    found = {}
    for system, queued, seed in chosen:
        snap = snapshot(system, queued, seed)
        answer = wire.dispatch(request_of(snap, dispatcher, profile))
        assert not answer.report.fallback_reason, answer.report.fallback_reason
        holes = holes_in(snap, answer, dispatcher, profile)
        if holes:
            found[f"{system.name} queued={queued} seed={seed}"] = holes
    assert found == {}, f"{dispatcher} {profile}: jobs left waiting that fit now: {found}"
