"""A typed, blocking client of DispatcherService.

Every call has a deadline; calls that fail with UNAVAILABLE (server restarting) or
RESOURCE_EXHAUSTED (all its decision slots busy) are retried with exponential backoff by gRPC's
own retry policy (service config), so a plugin survives a restarting or saturated server.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from types import TracebackType

import grpc

from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc

from .session import DispatchSession

DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024 * 1024


def _service_config(attempts: int, initial_backoff: float, max_backoff: float) -> str:
    return json.dumps(
        {
            "methodConfig": [
                {
                    "name": [{"service": "hpcdispatch.v1.DispatcherService"},
                             {"service": "hpcdispatch.v1.SessionService"}],
                    "retryPolicy": {
                        "maxAttempts": max(2, min(attempts, 5)),
                        "initialBackoff": f"{initial_backoff}s",
                        "maxBackoff": f"{max_backoff}s",
                        "backoffMultiplier": 2,
                        "retryableStatusCodes": ["UNAVAILABLE", "RESOURCE_EXHAUSTED"],
                    },
                }
            ]
        }
    )


class DispatcherClient:
    """Client of one hpcdispatch server.

    target: "host:port". timeout: default deadline per call, seconds. retries: attempts on
    UNAVAILABLE or RESOURCE_EXHAUSTED (2..5, gRPC's limit). credentials:
    grpc.ssl_channel_credentials(...) for TLS or mutual TLS; None for a plaintext channel.
    """

    def __init__(
        self,
        target: str,
        *,
        timeout: float = 30.0,
        retries: int = 4,
        initial_backoff: float = 0.2,
        max_backoff: float = 5.0,
        credentials: grpc.ChannelCredentials | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        extra_options: Sequence[tuple[str, str | int]] = (),
    ) -> None:
        options: list[tuple[str, str | int]] = [
            ("grpc.enable_retries", 1),
            ("grpc.service_config", _service_config(retries, initial_backoff, max_backoff)),
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.keepalive_time_ms", 30_000),
            ("grpc.keepalive_timeout_ms", 10_000),
            *extra_options,
        ]
        self.target = target
        self.timeout = timeout
        if credentials is None:
            self._channel = grpc.insecure_channel(target, options=options)
        else:
            self._channel = grpc.secure_channel(target, credentials, options=options)
        self._stub = pb_grpc.DispatcherServiceStub(self._channel)
        self._sessions = pb_grpc.SessionServiceStub(self._channel)

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Block until the channel is connected; raises grpc.FutureTimeoutError."""
        grpc.channel_ready_future(self._channel).result(timeout=timeout)

    def dispatch(
        self, request: pb.DispatchRequest, timeout: float | None = None
    ) -> pb.DispatchResponse:
        """Ask for a decision. The deadline also caps the server's search."""
        return self._stub.Dispatch(
            request, timeout=self.timeout if timeout is None else timeout, wait_for_ready=True
        )

    def session(self, timeout: float | None = None) -> DispatchSession:
        """A session for decisions on one cluster's successive snapshots: `decide(request)`
        takes the full DispatchRequest, sends only what changed since the previous call and
        resyncs on its own (hpcdispatch.client.session). Several sessions may share a client.
        """
        return DispatchSession(
            self._sessions, self.timeout if timeout is None else timeout,
            full_dispatch=lambda request, wait: self.dispatch(request, timeout=wait),
        )

    def report_completions(
        self, completions: Iterable[pb.JobCompletion], cluster: str = "",
        timeout: float | None = None,
    ) -> int:
        request = pb.ReportCompletionsRequest(completions=list(completions), cluster=cluster)
        response = self._stub.ReportCompletions(
            request, timeout=self.timeout if timeout is None else timeout, wait_for_ready=True
        )
        return response.accepted

    def describe(self, timeout: float | None = None) -> pb.DescribeServiceResponse:
        return self._stub.DescribeService(
            pb.DescribeServiceRequest(), timeout=self.timeout if timeout is None else timeout,
            wait_for_ready=True,
        )

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> DispatcherClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
