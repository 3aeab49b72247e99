"""The Python client against small real gRPC servers on loopback: retries and deadlines."""

from __future__ import annotations

import time
from concurrent import futures

import grpc
import pytest

from hpcdispatch.client import DispatcherClient
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc


class Flaky(pb_grpc.DispatcherServiceServicer):
    """Answers UNAVAILABLE `failures` times, then a decision; `delay` slows every answer."""

    def __init__(self, failures: int, delay: float = 0.0) -> None:
        self.failures, self.delay, self.calls = failures, delay, 0

    def Dispatch(
        self, request: pb.DispatchRequest, context: grpc.ServicerContext
    ) -> pb.DispatchResponse:
        self.calls += 1
        time.sleep(self.delay)
        if self.calls <= self.failures:
            context.abort(grpc.StatusCode.UNAVAILABLE, "restarting")
        return pb.DispatchResponse(time=request.time)


def serve(servicer: Flaky) -> tuple[grpc.Server, str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_DispatcherServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    return server, f"127.0.0.1:{port}"


def test_unavailable_is_retried_with_backoff() -> None:
    servicer = Flaky(failures=2)
    server, target = serve(servicer)
    try:
        with DispatcherClient(target, retries=4, initial_backoff=0.05) as client:
            response = client.dispatch(pb.DispatchRequest(time=42), timeout=120)
        assert response.time == 42
        assert servicer.calls == 3
    finally:
        server.stop(0)


def test_retries_are_bounded() -> None:
    servicer = Flaky(failures=100)
    server, target = serve(servicer)
    try:
        with DispatcherClient(target, retries=3, initial_backoff=0.01) as client, \
                pytest.raises(grpc.RpcError) as info:
            client.dispatch(pb.DispatchRequest(time=1), timeout=120)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE  # type: ignore[attr-defined]
        assert servicer.calls == 3
    finally:
        server.stop(0)


def test_the_deadline_is_sent_and_enforced() -> None:
    servicer = Flaky(failures=0, delay=1.0)
    server, target = serve(servicer)
    try:
        with DispatcherClient(target) as client, pytest.raises(grpc.RpcError) as info:
            client.dispatch(pb.DispatchRequest(time=1), timeout=0.2)
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED  # type: ignore[attr-defined]
    finally:
        server.stop(0)
