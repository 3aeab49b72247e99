"""Fair admission across client identities (server/rpc/decision_threads.py, admission.py), through
a real mTLS server on loopback with the default decision threads (workers 4: three shared) and
two slots: no set of identities whose slow decisions take every shared thread and every slot
keeps another identity from being answered, and readiness says NOT_SERVING only once a
newcomer could not be admitted either (issue #51, S2: two identities with two slow calls each
left Alice refused 24 of 24 tiny EASY decisions and readiness NOT_SERVING; four identities
with one each, 23 of 24).

The slow decisions are the stand-in `tests.instances.Held`, released by the test: every verdict
is an event, WAIT only bounds the waiting."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from hpcdispatch.client import channel_credentials
from hpcdispatch.server.rpc.app import RunningServer
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc
from tests.certificates import CertificateAuthority
from tests.instances import Held
from tests.server.sessions.test_session_calls import WAIT, metric, snapshot, wait_for

NAMES = ("alice", "bob", "carol", "dave", "erin")
TINY_CALLS = 24
DISPATCHER_SERVICE = "hpcdispatch.v1.DispatcherService"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA, a server certificate for localhost, a client certificate for each of NAMES."""
    ca = CertificateAuthority(tmp_path_factory.mktemp("pki"))
    server = ca.issue("server", "localhost", server=True)
    paths = {"ca": ca.pem.cert, "server_cert": server.cert, "server_key": server.key}
    for name in NAMES:
        pem = ca.issue(name, name, server=False)
        paths[f"{name}_cert"], paths[f"{name}_key"] = pem.cert, pem.key
    return paths


@pytest.fixture
def server(serve: Callable[..., RunningServer], pki: dict[str, Path]) -> RunningServer:
    return serve(workers=4, decision_concurrency=2, health_overload_seconds=0.2,
                 tls_cert=str(pki["server_cert"]), tls_key=str(pki["server_key"]),
                 tls_client_ca=str(pki["ca"]))


def channel_of(server: RunningServer, pki: dict[str, Path], name: str) -> grpc.Channel:
    return grpc.secure_channel(f"localhost:{server.port}", channel_credentials(
        pki["ca"], pki[f"{name}_cert"], pki[f"{name}_key"]))


@contextmanager
def stubs_of(server: RunningServer, pki: dict[str, Path]
             ) -> Iterator[dict[str, pb_grpc.DispatcherServiceStub]]:
    """A DispatcherService stub for each of NAMES, on its own channel with its certificate."""
    with ExitStack() as open_channels:
        yield {name: pb_grpc.DispatcherServiceStub(
            open_channels.enter_context(channel_of(server, pki, name))) for name in NAMES}


@pytest.fixture
def stubs(server: RunningServer, pki: dict[str, Path]
          ) -> Iterator[dict[str, pb_grpc.DispatcherServiceStub]]:
    with stubs_of(server, pki) as stubs:
        yield stubs


def hold(server: RunningServer, stubs: dict[str, pb_grpc.DispatcherServiceStub],
         calls: dict[str, int]) -> list[grpc.Future]:
    """Each identity's slow (held) decisions, sent at once; returns once each is in progress,
    waiting for a slot, or refused."""
    def holding() -> float:
        return (metric(server, "hpcdispatch_decisions_in_progress")
                + metric(server, "hpcdispatch_decisions_waiting"))

    already = holding()
    busy = [stubs[name].Dispatch.future(snapshot(seed=i), timeout=WAIT)
            for name, count in calls.items() for i in range(count)]

    def settled() -> bool:
        return holding() - already + sum(call.done() for call in busy) == len(busy)

    wait_for(settled, "every slow decision in progress, waiting or refused")
    return busy


def tiny_decisions_refused(stub: pb_grpc.DispatcherServiceStub) -> int:
    """Of TINY_CALLS EASY decisions on a small snapshot, one after the other, how many were
    refused (RESOURCE_EXHAUSTED)."""
    refused = 0
    for seed in range(TINY_CALLS):
        request = snapshot(seed=100 + seed)
        request.dispatcher = pb.DISPATCHER_EASY  # not held
        try:
            assert stub.Dispatch(request, timeout=WAIT).time == request.time
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, error
            refused += 1
    return refused


def readiness(channel: grpc.Channel) -> int:
    reply = health_pb2_grpc.HealthStub(channel).Check(
        health_pb2.HealthCheckRequest(service=DISPATCHER_SERVICE), timeout=WAIT)
    return int(reply.status)


def answered(busy: list[grpc.Future]) -> int:
    return sum(1 for call in busy if call.exception() is None)


def test_two_identities_with_two_slow_decisions_each_leave_a_third_answered(
    held: Held, server: RunningServer, stubs: dict[str, pb_grpc.DispatcherServiceStub],
) -> None:
    busy = hold(server, stubs, {"bob": 2, "carol": 2})
    try:
        # Bob and Carol hold the three shared threads (each within its share of two) and
        # both slots; the fourth slow call was refused.
        assert server.front is not None and server.front.threads.free == 0
        assert sum(call.done() for call in busy) == 1
        assert server.front.admitting()  # what readiness reads: a newcomer is admitted
        assert tiny_decisions_refused(stubs["alice"]) == 0  # before: 24 of 24
        assert server.front.admitting()
    finally:
        held.release.set()
    assert answered(busy) == 3


def test_four_identities_with_one_slow_decision_each_leave_a_fifth_answered(
    held: Held, server: RunningServer, stubs: dict[str, pb_grpc.DispatcherServiceStub],
) -> None:
    busy = hold(server, stubs, {"bob": 1, "carol": 1, "dave": 1, "erin": 1})
    try:
        # Three hold the shared threads, the fourth a reserve one: none was refused.
        assert not any(call.done() for call in busy)
        assert tiny_decisions_refused(stubs["alice"]) == 0  # before: 23 of 24
        assert server.front is not None and server.front.admitting()
    finally:
        held.release.set()
    assert answered(busy) == 4


def test_readiness_is_not_serving_only_once_a_newcomer_could_not_be_admitted(
    held: Held, serve: Callable[..., RunningServer], pki: dict[str, Path],
) -> None:
    server = serve(workers=4, decision_concurrency=2, health_overload_seconds=0.2,
                   identity_reserve=1, tls_cert=str(pki["server_cert"]),
                   tls_key=str(pki["server_key"]), tls_client_ca=str(pki["ca"]))
    assert server.front is not None
    with stubs_of(server, pki) as stubs, channel_of(server, pki, "alice") as probe:
        busy = hold(server, stubs, {"bob": 2, "carol": 2})
        try:
            assert server.front.admitting()  # the shared threads are taken, the reserve not
            assert readiness(probe) == SERVING
            busy += hold(server, stubs, {"dave": 1})  # the reserve thread: nothing is left
            assert not server.front.admitting()
            wait_for(lambda: readiness(probe) == NOT_SERVING,
                     "readiness NOT_SERVING once nobody could be admitted")
            assert tiny_decisions_refused(stubs["alice"]) == TINY_CALLS
        finally:
            held.release.set()
        wait_for(lambda: readiness(probe) == SERVING, "readiness SERVING again")
        # (inside: closing the channels would cancel a slow call not yet answered)
        assert answered(busy) == 4
