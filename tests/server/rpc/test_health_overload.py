"""Health under overload (server/rpc/overload_health.py), through a real server on loopback:
while no decision can be admitted for `health_overload_seconds`, DispatcherService and
SessionService say NOT_SERVING (the readiness probe's service) and the server itself ("", the
liveness probe's and the container HEALTHCHECK's) stays SERVING; as soon as a decision can be
admitted again, both say SERVING. The busy decision is the stand-in `tests.instances.Held`,
released by the test: every verdict is an event, WAIT only bounds the waiting."""

from __future__ import annotations

from collections.abc import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from hpcdispatch.server.rpc.app import RunningServer
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc
from tests.instances import Held
from tests.server.sessions.test_session_calls import WAIT, snapshot, wait_for

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
DISPATCHER_SERVICE = "hpcdispatch.v1.DispatcherService"
SESSION_SERVICE = "hpcdispatch.v1.SessionService"


def test_readiness_is_not_serving_while_no_decision_can_be_admitted_then_serving_again(
    held: Held, serve: Callable[..., RunningServer],
) -> None:
    server = serve(workers=2, health_overload_seconds=0.2)  # one decision thread
    with grpc.insecure_channel(server.target) as channel:
        health = health_pb2_grpc.HealthStub(channel)

        def status(service: str) -> int:
            reply = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=WAIT)
            return int(reply.status)

        assert status(DISPATCHER_SERVICE) == SERVING
        busy = pb_grpc.DispatcherServiceStub(channel).Dispatch.future(snapshot(), timeout=WAIT)
        try:
            assert held.entered.wait(WAIT), "the decision holding the only thread did not start"
            wait_for(lambda: status(DISPATCHER_SERVICE) == NOT_SERVING,
                     "readiness NOT_SERVING while the only decision thread is held")
            assert status(SESSION_SERVICE) == NOT_SERVING
            assert status("") == SERVING  # alive: a liveness probe must not restart it
            # What needs no decision is still answered.
            described = pb_grpc.DispatcherServiceStub(channel).DescribeService(
                pb.DescribeServiceRequest(), timeout=WAIT)
            assert described.version
        finally:
            held.release.set()
        assert busy.result(timeout=WAIT).time == snapshot().time
        wait_for(lambda: status(DISPATCHER_SERVICE) == SERVING,
                 "readiness SERVING again once a decision can be admitted")
        assert status(SESSION_SERVICE) == SERVING
