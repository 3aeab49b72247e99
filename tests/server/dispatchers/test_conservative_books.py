"""Issue #33, item 5: conservative's reservation book is kept per caller and cluster, and its
decision ends at its deadline.

Through a real mTLS server on loopback, two client identities (alice, bob) dispatch on the same
node list, job ids and all, in turns; each one's decisions must be exactly those a conservative
dispatcher of its own makes on its snapshots alone (run here, in the test, on a fresh
dispatcher). Before, the book was keyed by the node list only: bob's decision in between
replaced the reservations alice's next decision starts from, and her starts changed. Likewise
one identity's decisions on two clusters that name the same nodes, and the CP dispatchers'
promise book (issue #34), which keeps its promises under the same key (`CallerScope`).

The deadline is checked by events, not by the clock: the decision's deadline is made to pass at
a chosen node-profile operation (the k-th reservation given back, at several points of the
decision), and at most a few more operations may follow before the decision answers, with a
plan that passes the independent check. Before, a deadline passing inside one repacking attempt
let it move every future reservation first (tens of operations here, one per queued job on
bigger queues, each a few milliseconds at 64 nodes and more at 1,000).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from hpcdispatch.client import channel_credentials
from hpcdispatch.proto_convert import snapshot_to_pb
from hpcdispatch.server.dispatchers import DISPATCHERS
from hpcdispatch.server.dispatchers.base import CallerScope, SearchControl
from hpcdispatch.server.dispatchers.conservative import ConservativeDispatcher
from hpcdispatch.server.dispatchers.planning.node_profile import NodeProfile
from hpcdispatch.server.dispatchers.planning.stopping import CHECK_EVERY
from hpcdispatch.server.domain.profiles import PROFILES
from hpcdispatch.server.pipeline import run_decision
from hpcdispatch.server.predictors.walltime import WalltimePredictor
from hpcdispatch.server.rpc.app import RunningServer
from hpcdispatch.snapshot import Snapshot
from hpcdispatch.synthetic import synthetic_snapshot
from hpcdispatch.systems import PRESETS
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc
from tests.certificates import two_client_pki
from tests.observability import metrics_server

# Decisions of a few milliseconds; a deadline no machine load reaches, so that no decision is
# cut short (a cut decision differs from its reference for that reason alone).
TIMEOUT_SECONDS = 300.0

Starts = dict[str, tuple[str, ...]]  # job id -> node of each unit


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return two_client_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def server(pki: dict[str, Path]) -> Iterator[RunningServer]:
    with metrics_server(tls_cert=str(pki["server_cert"]), tls_key=str(pki["server_key"]),
                        tls_client_ca=str(pki["ca"]), tls_client_identities=("alice", "bob"),
                        workers=3) as running:
        yield running


def stub_of(server: RunningServer, pki: dict[str, Path], who: str
            ) -> pb_grpc.DispatcherServiceStub:
    credentials = channel_credentials(pki["ca"], pki[f"{who}_cert"], pki[f"{who}_key"])
    return pb_grpc.DispatcherServiceStub(grpc.secure_channel(server.target, credentials))


def queue_of(seed: int) -> list[Snapshot]:
    """A Eurora-size cluster at t and 600 s later, when half its running jobs ended early
    (the reservations held since t then move earlier, in their order, as conservative keeps
    them). Every seed names the same 64 nodes and the same job ids."""
    first = synthetic_snapshot(PRESETS["eurora"], 40, busy=0.9, seed=seed)
    return [first, dataclasses.replace(first, time=first.time + 600, running=first.running[::2])]


def dispatched(stub: pb_grpc.DispatcherServiceStub, snapshot: Snapshot, cluster: str) -> Starts:
    request = snapshot_to_pb(snapshot)
    request.cluster = cluster
    request.dispatcher = pb.DISPATCHER_CONSERVATIVE
    request.predictor = pb.PREDICTOR_WALLTIME
    response = stub.Dispatch(request, timeout=TIMEOUT_SECONDS)
    assert not response.report.fallback_reason
    return {s.job_id: tuple(u.node_id for u in s.units) for s in response.starts}


def decisions_of(
    steps: list[tuple[Snapshot, CallerScope]], kind: int = pb.DISPATCHER_CONSERVATIVE,
    profile: str = "qos",
) -> list[Starts]:
    """The decisions, in turn, of one fresh dispatcher of `kind` on these snapshots, each
    asked for by its caller scope."""
    table = {**DISPATCHERS, kind: type(DISPATCHERS[kind])()}
    decisions = []
    for snapshot, scope in steps:
        control = SearchControl(settings=PROFILES[profile][0], scope=scope,
                                deadline=time.monotonic() + TIMEOUT_SECONDS)
        result = run_decision(snapshot, kind, WalltimePredictor(), control, dispatchers=table)
        assert not result.fallback_code
        decisions.append({s.job_id: s.nodes for s in result.decision.starts})
    return decisions


def own_decisions(snapshots: list[Snapshot]) -> list[Starts]:
    """The decisions of a conservative dispatcher that sees these snapshots and no others."""
    return decisions_of([(snapshot, CallerScope()) for snapshot in snapshots])


def test_two_identities_on_the_same_nodes_keep_their_own_reservations(
    server: RunningServer, pki: dict[str, Path],
) -> None:
    cluster = f"shared-{uuid.uuid4().hex[:8]}"  # the same cluster name for both, too
    callers = {"alice": queue_of(seed=0), "bob": queue_of(seed=1_000)}
    stubs = {who: stub_of(server, pki, who) for who in callers}
    got: dict[str, list[Starts]] = {who: [] for who in callers}
    for step in range(2):  # alice, bob, alice, bob
        for who, snapshots in callers.items():
            got[who].append(dispatched(stubs[who], snapshots[step], cluster))
    for who, snapshots in callers.items():
        assert got[who] == own_decisions(snapshots), who


def test_one_identitys_clusters_keep_their_own_reservations(
    server: RunningServer, pki: dict[str, Path],
) -> None:
    run = uuid.uuid4().hex[:8]
    clusters = {f"east-{run}": queue_of(seed=1), f"west-{run}": queue_of(seed=1_001)}
    alice = stub_of(server, pki, "alice")
    got: dict[str, list[Starts]] = {cluster: [] for cluster in clusters}
    for step in range(2):  # east, west, east, west: the same nodes, another cluster name
        for cluster, snapshots in clusters.items():
            got[cluster].append(dispatched(alice, snapshots[step], cluster))
    for cluster, snapshots in clusters.items():
        assert got[cluster] == own_decisions(snapshots), cluster


def test_the_promise_book_is_kept_per_caller_scope() -> None:
    alice, bob = CallerScope("alice", "shared"), CallerScope("bob", "shared")
    alices, bobs = queue_of(seed=2), queue_of(seed=1_002)
    in_turns = decisions_of([(alices[0], alice), (bobs[0], bob), (alices[1], alice)],
                            pb.DISPATCHER_PCP20, profile="book")
    alone = decisions_of([(alices[0], alice), (alices[1], alice)], pb.DISPATCHER_PCP20,
                         profile="book")
    assert [in_turns[0], in_turns[2]] == alone


# -- the deadline ---------------------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class Clock:
    """Node-profile operations counted; the deadline passes at the `due`-th fit test
    (NodeProfile.fits_at: the repacking attempts are made of them)."""

    due: int | None = None
    fit_tests: int = 0
    operations: int = 0
    after_deadline: int = 0

    @property
    def passed(self) -> bool:
        return self.due is not None and self.fit_tests >= self.due


PROFILE_OPERATIONS = ("take", "place", "fits_at", "fits_on", "earliest", "take_all")


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    counted = Clock()

    def counting(name: str) -> Callable[..., Any]:
        original = getattr(NodeProfile, name)

        def operation(self: NodeProfile, *args: Any, **kwargs: Any) -> Any:
            counted.operations += 1
            counted.after_deadline += counted.passed
            if name == "fits_at":
                counted.fit_tests += 1
            return original(self, *args, **kwargs)
        return operation

    for name in PROFILE_OPERATIONS:
        monkeypatch.setattr(NodeProfile, name, counting(name))
    return counted


@dataclasses.dataclass(frozen=True, slots=True)
class DeadlineAt(SearchControl):
    """A search control whose deadline has passed once the clock says so."""

    clock: Clock = dataclasses.field(default_factory=Clock)

    def remaining(self) -> float:
        return 0.0 if self.clock.passed else TIMEOUT_SECONDS


def test_a_conservative_decision_answers_within_a_few_steps_of_its_deadline(clock: Clock) -> None:
    snapshot = synthetic_snapshot(PRESETS["eurora"], 150, busy=0.9, seed=4)
    table = {**DISPATCHERS, pb.DISPATCHER_CONSERVATIVE: ConservativeDispatcher()}

    def decide(due: int | None) -> int:
        """The starts of a decision whose deadline passes at the `due`-th fit test."""
        clock.due, clock.fit_tests, clock.operations, clock.after_deadline = due, 0, 0, 0
        control = DeadlineAt(settings=PROFILES["qos"][0], deadline=0.0, clock=clock)
        result = run_decision(snapshot, pb.DISPATCHER_CONSERVATIVE, WalltimePredictor(),
                              control, dispatchers=table)
        assert not result.fallback_code  # the plan so far passed the independent check
        return len(result.decision.starts)

    decide(None)
    whole = clock.fit_tests  # fit tests of the whole decision (repacking attempts)
    assert whole > 100
    after = {}
    for tenth in range(1, 10):
        decide(whole * tenth // 10)
        assert clock.passed
        after[tenth] = clock.after_deadline
    assert max(after.values()) <= CHECK_EVERY + 2, after
