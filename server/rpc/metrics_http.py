"""The /metrics HTTP endpoint: plain HTTP or HTTPS (optionally requiring client certificates),
with optional HTTP basic auth checked against a bcrypt hash, as Prometheus' own web
configuration (`basic_auth_users`) does."""

from __future__ import annotations

import base64
import errno
import hashlib
import hmac
import socket
import ssl
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import bcrypt
from prometheus_client import CollectorRegistry, make_wsgi_app

__all__ = ["BasicAuth", "MetricsTls", "PortInUseError", "check_port_free", "start_metrics_http"]

REALM = "hpcdispatch metrics"
HANDSHAKE_TIMEOUT_SECONDS = 10.0
VERIFIED_MEMORY = 16  # Authorization headers remembered as verified (bcrypt is slow on purpose)

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

# Configuration key -> (command-line flag, environment variable), for the busy-port message.
_PORT_KEYS = {
    "listen": ("--listen", "HPCDISPATCH_LISTEN"),
    "metrics_port": ("--metrics-port", "HPCDISPATCH_METRICS_PORT"),
}


class PortInUseError(OSError):
    """A configured port is held by another process (another hpcdispatch serve, or any other
    program); the message names the configuration key and what to do."""

    def __init__(self, key: str, address: str) -> None:
        flag, env = _PORT_KEYS.get(
            key, (f"--{key.replace('_', '-')}", f"HPCDISPATCH_{key.upper()}"))
        super().__init__(
            errno.EADDRINUSE,
            f"configuration key '{key}': {address} is already in use by another process "
            f"(another hpcdispatch serve, or another program: see `ss -ltnp 'sport = "
            f":{address.rsplit(':', 1)[-1]}'`). Stop that process, or choose a free port "
            f"with {flag} / {env} / '{key}' in the --config file",
        )
        self.key = key
        self.address = address

    def __str__(self) -> str:
        return str(self.strerror)


def check_port_free(key: str, host: str, port: int) -> None:
    """Raise PortInUseError when host:port cannot be bound because someone listens there.

    Binds (with SO_REUSEADDR, as servers do, and without SO_REUSEPORT) every address `host`
    resolves to, then lets go. gRPC binds with SO_REUSEPORT unless told not to, and would then
    share a port with another server silently; this check also spares the C-core error line
    a failed bind prints. Port 0 (a free one) is not checked.
    """
    if port == 0:
        return
    host = host.strip("[]")
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return  # the bind itself reports an unknown host
    for family, kind, proto, _, sockaddr in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(sockaddr)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    shown = f"[{sockaddr[0]}]" if family == socket.AF_INET6 else sockaddr[0]
                    raise PortInUseError(key, f"{shown}:{port}") from exc


@dataclass(frozen=True, slots=True)
class MetricsTls:
    """HTTPS for /metrics; with `client_ca`, scrapers must present a certificate it signed."""

    cert: str
    key: str
    client_ca: str | None = None

    def context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"configuration keys 'metrics_tls_cert' / 'metrics_tls_key': "
                             f"cannot load {self.cert} / {self.key}: {exc}") from exc
        if self.client_ca:
            try:
                context.load_verify_locations(cafile=self.client_ca)
            except (OSError, ssl.SSLError) as exc:
                raise ValueError(f"configuration key 'metrics_tls_client_ca': cannot load "
                                 f"{self.client_ca}: {exc}") from exc
            context.verify_mode = ssl.CERT_REQUIRED
        return context


@dataclass(frozen=True, slots=True)
class BasicAuth:
    """One user and the bcrypt hash of its password."""

    user: str
    password_hash: str

    def verifies(self, header: str) -> bool:
        """Whether an `Authorization: Basic ...` header carries this user and password."""
        scheme, _, encoded = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, sep, password = base64.b64decode(encoded.strip(), validate=True).decode(
                "utf-8").partition(":")
        except (ValueError, UnicodeDecodeError):
            return False
        if not sep or not hmac.compare_digest(user.encode(), self.user.encode()):
            return False
        try:
            return bcrypt.checkpw(password.encode("utf-8"), self.password_hash.encode("ascii"))
        except ValueError:
            return False


def _with_basic_auth(app: WsgiApp, auth: BasicAuth) -> WsgiApp:
    """`app` behind basic auth; a header once verified is remembered (by its SHA-256)."""
    verified: list[bytes] = []
    lock = threading.Lock()

    def guarded(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        header = str(environ.get("HTTP_AUTHORIZATION", ""))
        digest = hashlib.sha256(header.encode("utf-8", "replace")).digest()
        with lock:
            known = digest in verified
        if not known and header and auth.verifies(header):
            with lock:
                verified.append(digest)
                del verified[:-VERIFIED_MEMORY]
            known = True
        if not known:
            start_response("401 Unauthorized", [
                ("WWW-Authenticate", f'Basic realm="{REALM}", charset="UTF-8"'),
                ("Content-Type", "text/plain; charset=utf-8"),
            ])
            return [b"401 Unauthorized: /metrics needs HTTP basic auth\n"]
        return app(environ, start_response)

    return guarded


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No access log on standard error (the service logs structlog lines there)."""


class _MetricsServer(ThreadingMixIn, WSGIServer):
    """A thread per connection; with TLS, the handshake runs in that thread, so a slow or
    plaintext client cannot hold up the others."""

    daemon_threads = True
    tls_context: ssl.SSLContext | None = None

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.tls_context is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(HANDSHAKE_TIMEOUT_SECONDS)
        with self.tls_context.wrap_socket(request, server_side=True) as wrapped:
            wrapped.settimeout(None)
            super().finish_request(wrapped, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Failed handshakes and dropped connections are the client's business: no trace."""


def start_metrics_http(
    registry: CollectorRegistry, host: str, port: int, tls: MetricsTls | None = None,
    auth: BasicAuth | None = None,
) -> tuple[WSGIServer, threading.Thread]:
    """Serve `registry` at /metrics on host:port (port 0: a free one) in a daemon thread."""
    app: WsgiApp = make_wsgi_app(registry)
    if auth is not None:
        app = _with_basic_auth(app, auth)
    family, address = _address_family(host, port)

    class Server(_MetricsServer):
        address_family = family
        tls_context = tls.context() if tls is not None else None

    try:
        httpd = make_server(address, port, app, Server, handler_class=_QuietHandler)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            shown = f"[{address}]" if family == socket.AF_INET6 else address
            raise PortInUseError("metrics_port", f"{shown}:{port}") from exc
        raise
    thread = threading.Thread(target=httpd.serve_forever, name="metrics-http", daemon=True)
    thread.start()
    return httpd, thread


def _address_family(host: str, port: int) -> tuple[socket.AddressFamily, str]:
    """IPv4 or IPv6, as the host resolves."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _, _, _, sockaddr = infos[0]
    return family, str(sockaddr[0])
