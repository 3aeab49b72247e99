"""A typed, blocking client of DispatcherService.

Every call has a deadline; calls that fail with UNAVAILABLE (server restarting) or
RESOURCE_EXHAUSTED (all its decision slots busy) are retried with exponential backoff by gRPC's
own retry policy (service config), so a plugin survives a restarting or saturated server.

Before its first call a client checks, within `connect_timeout` seconds, that a service answers
at its target; when none does (nothing listening, a wrong host, plaintext against TLS, TLS
against plaintext, a refused or missing client certificate) it raises `ServiceUnreachable`
(a grpc.RpcError of code UNAVAILABLE) naming the target and the likely cause, rather than
waiting out the whole deadline of the call. Once a service has answered, calls wait for the
connection (wait-for-ready), so that a restart does not fail them.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any

import grpc

from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc

from .call_error import CallError
from .session import DispatchSession
from .session_stream import Backoff, SessionStream

DEFAULT_MAX_MESSAGE_BYTES = 256 * 1024 * 1024
DEFAULT_CONNECT_TIMEOUT = 5.0


class ServiceUnreachable(CallError):
    """No service answers at the target: UNAVAILABLE, with the target and the likely cause.

    A grpc.Call as the errors of failed calls are, so code() and details() read the same."""

    def __init__(self, target: str, cause: str, detail: str = "") -> None:
        super().__init__(grpc.StatusCode.UNAVAILABLE, "")
        self.target = target
        self.cause = cause
        self.detail = detail

    def details(self) -> str:
        text = f"cannot reach an hpcdispatch service at {self.target}: {self.cause}"
        return f"{text} (gRPC: {self.detail})" if self.detail else text


_TLS_OPTIONS = "--tls-ca, and --tls-cert / --tls-key if it requires client certificates"


def _likely_cause(detail: str, tls: bool) -> str | None:
    """What a transport error's text most likely means, or None when it is not one (e.g. a
    server's own UNAVAILABLE while it drains)."""
    text = detail.lower()
    if "connection refused" in text:
        return ("nothing is listening there (is `hpcdispatch serve` running, on this host "
                "and port?)")
    if ("dns" in text or "resolv" in text or "lookup" in text
            or "name or service not known" in text):
        return "the host name does not resolve"
    if "no route" in text or "network is unreachable" in text or "timed out" in text:
        return "the host cannot be reached (a wrong address, or a firewall in the way)"
    if tls:
        if "wrong_version_number" in text or "http/1" in text:
            return ("the TLS handshake failed: the server does not speak TLS there (a "
                    "plaintext server? then drop the TLS options)")
        if "peer name" in text or "hostname" in text or "subject alternative" in text:
            return ("the server's certificate does not name this target: give the name it "
                    "carries with --tls-server-name")
        if "certificate_verify_failed" in text or "verify" in text or "unknown_ca" in text:
            return ("the server's certificate is not signed by the CA given with --tls-ca "
                    "(or, without --tls-ca, by one of the system's roots)")
        if ("socket closed" in text or "connection reset" in text or "certificate" in text
                or "end of tcp stream" in text or "alert" in text):
            return ("the server closed the connection during the TLS handshake: it most "
                    "likely requires a client certificate signed by its client CA "
                    "(--tls-cert / --tls-key) and got none, or one it does not trust")
        if "ssl" in text or "handshake" in text or "tls" in text:
            return "the TLS handshake failed"
    elif ("socket closed" in text or "connection reset" in text or "ssl" in text
          or "end of tcp stream" in text or "tls" in text or "handshake" in text
          or "http" in text):
        return (f"the connection was closed while setting it up: the server most likely "
                f"requires TLS (give {_TLS_OPTIONS}), or something other than an "
                "hpcdispatch service listens there")
    if "failed to connect" in text:
        return "the connection could not be set up"
    return None


def _listening_cause(target: str, timeout: float) -> str | None:
    """For a plaintext client: why a server at one of `target`'s addresses did not answer
    (it speaks TLS, or it is not a gRPC service), or None when none of them accepts a
    connection (or the target is not host:port)."""
    host, _, port = target.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit() or host.startswith(("dns:", "unix:", "ipv4:", "ipv6:")):
        return None
    try:
        addresses = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None
    listening = None
    for family, kind, proto, _, address in addresses:
        speaks = _speaks_tls(family, kind, proto, address, min(timeout, 2.0))
        if speaks:
            return (f"the server at {_shown_address(address)} speaks TLS: give {_TLS_OPTIONS} "
                    "(a plaintext client cannot talk to it)")
        if speaks is not None and listening is None:
            listening = address
    if listening is None:
        return None
    return (f"something listens at {_shown_address(listening)} but closed the connection: "
            "not an hpcdispatch service (or one behind a proxy that speaks neither TLS nor "
            "gRPC)")


def _shown_address(address: tuple[Any, ...]) -> str:
    host, port = address[0], address[1]
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"


def _speaks_tls(family: int, kind: int, proto: int, address: tuple[Any, ...],
                timeout: float) -> bool | None:
    """Whether the server at `address` answers a TLS handshake (its certificate not checked:
    only whether it speaks TLS); None when nothing accepts a connection there."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    try:
        raw = socket.socket(family, kind, proto)
    except OSError:
        return None
    with raw:
        raw.settimeout(timeout)
        try:
            raw.connect(address)
        except OSError:
            return None
        try:
            with context.wrap_socket(raw):
                return True
        except ssl.SSLError as error:
            # An alert is TLS talking (a server that wants a client certificate, say); a
            # plaintext server answers a ClientHello with bytes that are not a record.
            return "alert" in str(error).lower()
        except OSError:
            return False


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
    connect_timeout: how long the first call waits for a connection to the service before it
    raises ServiceUnreachable (module docstring).
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
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
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
        self.backoff = Backoff(max(2, min(retries, 5)), initial_backoff, max_backoff)
        self.connect_timeout = connect_timeout
        self._tls = credentials is not None
        self._reached = False
        self._reach_lock = threading.Lock()
        if credentials is None:
            self._channel = grpc.insecure_channel(target, options=options)
        else:
            self._channel = grpc.secure_channel(target, credentials, options=options)
        self._stub = pb_grpc.DispatcherServiceStub(self._channel)
        self._sessions = pb_grpc.SessionServiceStub(self._channel)

    def wait_ready(self, timeout: float = 10.0) -> None:
        """Block until the channel is connected; raises grpc.FutureTimeoutError."""
        grpc.channel_ready_future(self._channel).result(timeout=timeout)

    def check_reachable(self, timeout: float | None = None) -> None:
        """Raise ServiceUnreachable unless a service answers at the target within `timeout`
        seconds (default connect_timeout). Done once, before the client's first call."""
        if self._reached:
            return
        with self._reach_lock:
            if self._reached:
                return
            self._probe(self.connect_timeout if timeout is None else timeout)
            self._reached = True

    def _probe(self, timeout: float) -> None:
        # One call without wait-for-ready: a refused connection or handshake fails at once,
        # with gRPC's reason, where a waiting call would wait out its whole deadline.
        try:
            self._stub.DescribeService(pb.DescribeServiceRequest(), timeout=timeout,
                                       wait_for_ready=False)
        except grpc.RpcError as error:
            code = error.code()
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                if self._connected():
                    return  # a service too busy to describe itself in time: it is there
                raise ServiceUnreachable(self.target, self._silent_cause(timeout)) from None
            if code != grpc.StatusCode.UNAVAILABLE:
                return  # a service answered (UNIMPLEMENTED from a stand-in, ...)
            detail = " ".join(str(error.details() or "").split())
            cause = _likely_cause(detail, self._tls)
            if not self._tls and cause is not None and (
                    cause.startswith(("nothing is listening", "the connection was closed"))):
                # gRPC names the last address it tried (localhost: ::1, refused) and cannot
                # tell a TLS server from another closing the connection: ask each address.
                cause = _listening_cause(self.target, timeout) or cause
            if cause is None and not self._connected():
                cause = "the connection could not be set up"
            if cause is not None:
                raise ServiceUnreachable(self.target, cause, detail) from None

    def _connected(self) -> bool:
        """Whether the channel is connected now (or within a moment)."""
        try:
            grpc.channel_ready_future(self._channel).result(timeout=0.3)
        except grpc.FutureTimeoutError:
            return False
        return True

    def _silent_cause(self, timeout: float) -> str:
        """Why no connection came up in `timeout` seconds when gRPC does not say."""
        host = self.target.rsplit(":", 1)[0].strip("[]")
        if host.startswith(("dns:", "unix:", "ipv4:", "ipv6:")):
            return f"no connection within {timeout:g} s"
        try:
            socket.getaddrinfo(host, None)
        except (OSError, UnicodeError):
            return f"the host name {host!r} does not resolve"
        return (f"no connection within {timeout:g} s: the host does not answer (a wrong host "
                "or port, or a firewall dropping the connection)")

    def dispatch(
        self, request: pb.DispatchRequest, timeout: float | None = None
    ) -> pb.DispatchResponse:
        """Ask for a decision. The deadline also caps the server's search."""
        self.check_reachable()
        return self._stub.Dispatch(
            request, timeout=self.timeout if timeout is None else timeout, wait_for_ready=True
        )

    def session(self, timeout: float | None = None, stream: bool = True) -> DispatchSession:
        """A session for decisions on one cluster's successive snapshots: `decide(request)`
        takes the full DispatchRequest, sends only what changed since the previous call and
        resyncs on its own (hpcdispatch.client.session). Several sessions may share a client.

        `stream`: its calls go on one bidirectional stream (`session_stream()`), which a
        server without streams, or without a free decision thread for one, has them sent as
        unary calls instead; False: unary calls (OpenSession, UpdateSession) only, for a
        caller that decides seldom (a stream holds a server thread for its whole life).
        """
        return DispatchSession(
            self._sessions, self.timeout if timeout is None else timeout,
            full_dispatch=lambda request, wait: self.dispatch(request, timeout=wait),
            check_reachable=self.check_reachable,
            stream=self.session_stream() if stream else None,
            unary_report=lambda request, wait: self._stub.ReportCompletions(
                request, timeout=wait, wait_for_ready=True),
        )

    def session_stream(self) -> SessionStream:
        """Session calls on one bidirectional stream (hpcdispatch.client.session_stream),
        retried as this client retries its unary calls."""
        return SessionStream(self._sessions, self.backoff)

    def report_completions(
        self, completions: Iterable[pb.JobCompletion], cluster: str = "",
        timeout: float | None = None,
    ) -> int:
        request = pb.ReportCompletionsRequest(completions=list(completions), cluster=cluster)
        self.check_reachable()
        response = self._stub.ReportCompletions(
            request, timeout=self.timeout if timeout is None else timeout, wait_for_ready=True
        )
        return response.accepted

    def describe(self, timeout: float | None = None) -> pb.DescribeServiceResponse:
        self.check_reachable()
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
