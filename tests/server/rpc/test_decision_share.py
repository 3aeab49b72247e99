"""One client identity's share of the decision threads (server/rpc/decision_threads.py), through
a real mTLS server on loopback: a caller that keeps its whole share busy is refused its next
decision at once, RESOURCE_EXHAUSTED naming the share, while another identity's decisions are
answered. The busy decisions are the stand-in `tests.instances.Held`, released by the test, so
every verdict is an event; WAIT only bounds the waiting."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import grpc
import pytest

from hpcdispatch.client import channel_credentials
from hpcdispatch.server.config import ServerConfig
from hpcdispatch.server.rpc.app import RunningServer
from hpcdispatch.server.rpc.decision_threads import (
    ALL_TAKEN,
    SHARE_TAKEN,
    DecisionThreads,
    identity_reserve,
    identity_share,
)
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc
from tests.certificates import two_client_pki
from tests.instances import Held
from tests.server.sessions.test_session_calls import WAIT, metric, snapshot, wait_for


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return two_client_pki(tmp_path_factory.mktemp("pki"))


def test_a_share_is_all_threads_but_one_with_client_certificates_and_all_without() -> None:
    assert identity_share(ServerConfig(), 3) == 3
    assert identity_share(ServerConfig(tls_client_ca="ca.pem"), 3) == 2
    assert identity_share(ServerConfig(tls_client_ca="ca.pem"), 1) == 1
    assert identity_share(ServerConfig(max_decisions_per_identity=1), 3) == 1
    assert identity_share(ServerConfig(max_decisions_per_identity=9), 3) == 3
    threads = DecisionThreads(3, 2)
    assert [threads.take("b"), threads.take("b"), threads.take("b")] == [None, None, SHARE_TAKEN]
    assert threads.take("a") is None and threads.take("c") == ALL_TAKEN
    threads.give_back("b")
    assert threads.take("c") is None and threads.free == 0


def test_an_identity_holding_none_gets_a_reserve_thread_once_the_shared_are_taken() -> None:
    assert identity_reserve(ServerConfig()) == 0  # one identity: nobody else to keep one for
    assert identity_reserve(ServerConfig(tls_client_ca="ca.pem")) == 8
    threads = DecisionThreads(3, 2, reserve=2)
    assert [threads.take(who) for who in ("b", "b", "c")] == [None, None, None]
    assert threads.take("c") == ALL_TAKEN  # Carol holds one: the reserve is for newcomers
    assert threads.take("a") is None and threads.take("a") == ALL_TAKEN
    assert threads.admitting_newcomer() and threads.take("d") is None
    assert not threads.admitting_newcomer() and threads.take("e") == ALL_TAKEN
    threads.give_back("a")
    assert threads.reserve_free == 1 and threads.held_by("a") == 0
    assert threads.take("e") is None


def test_an_identity_beyond_its_share_is_refused_and_another_is_answered(
    held: Held, serve: Callable[..., RunningServer], pki: dict[str, Path],
) -> None:
    # 3 decision threads, Bob's share 2 (all but one with client certificates); 3 slots, so
    # that Alice's decision is not queued behind Bob's held ones.
    server = serve(workers=4, decision_concurrency=3, tls_cert=str(pki["server_cert"]),
                   tls_key=str(pki["server_key"]), tls_client_ca=str(pki["ca"]))

    def channel_of(who: str) -> grpc.Channel:
        return grpc.secure_channel(f"localhost:{server.port}", channel_credentials(
            pki["ca"], pki[f"{who}_cert"], pki[f"{who}_key"]))

    with channel_of("bob") as bob, channel_of("alice") as alice:
        bobs = pb_grpc.DispatcherServiceStub(bob)
        busy = [bobs.Dispatch.future(snapshot(seed=i), timeout=WAIT) for i in (1, 2)]
        try:
            wait_for(lambda: metric(server, "hpcdispatch_decisions_in_progress") == 2,
                     "both of Bob's decisions are held")
            with pytest.raises(grpc.RpcError) as refused:
                bobs.Dispatch(snapshot(seed=3), timeout=WAIT)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "max_decisions_per_identity" in (refused.value.details() or "")
            assert metric(server, "hpcdispatch_decisions_refused_total", reason="share") == 1
            request = snapshot(seed=4)
            request.dispatcher = pb.DISPATCHER_EASY  # not held: decided at once
            answer = pb_grpc.DispatcherServiceStub(alice).Dispatch(request, timeout=WAIT)
            assert answer.time == request.time
        finally:
            held.release.set()
        assert [call.result().time for call in busy] == [snapshot(seed=i).time for i in (1, 2)]
