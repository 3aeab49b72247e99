"""The gRPC server: DispatcherService and SessionService with health, reflection, keepalive,
metrics, request ids, optional TLS / mutual TLS, and graceful stop.

The server is grpc.aio's, on an event loop of its own (server/rpc/server_loop.py); the calls'
work runs in a pool of `workers` threads (server/rpc/call_pool.py), which a call holds only
while it is worked on. After SIGTERM the process exits within `grace_seconds` whatever a call
is doing: a call still running then (a plugin that never returns) is named in the log and left
behind (the pool's threads are daemon threads).
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc

from ..config import ServerConfig, validate_config
from ..domain.plugin_calls import calls_left_after
from ..intake.snapshot_intake import SnapshotIntake
from ..logging_config import configure_logging
from ..pipeline import Predictors, open_predictors
from ..sessions.heap import freeze_long_lived
from .call_pool import CallPool, pooled
from .decision_front import DecisionFront
from .decision_threads import identity_reserve
from .decode_errors import DecodeErrorInterceptor
from .dispatch_service import DispatcherService
from .draining import Drain
from .metrics import ServiceMetrics
from .metrics_http import BasicAuth, MetricsTls, PortInUseError, check_port_free
from .offered import load_plugins
from .overload_health import watch_overload
from .request_id import RequestIdInterceptor
from .server_loop import ServerLoop
from .session_service import SessionServicer
from .shutdown import exit_leaving
from .tls import identity_interceptors, server_credentials, tls_mode

__all__ = ["PortInUseError", "RunningServer", "ServerConfig", "serve", "start_server"]

log = structlog.get_logger("hpcdispatch.server")

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["DispatcherService"].full_name
SESSION_SERVICE_NAME = pb.DESCRIPTOR.services_by_name["SessionService"].full_name
# Of the grace period, the part kept for the calls cancelled at its end to give back what they
# hold (a cancelled search stops within milliseconds): at most this, and a fifth of it.
CANCEL_RESERVE_SECONDS = 1.0


@dataclass
class RunningServer:
    server: grpc.aio.Server
    port: int
    health: Any  # grpc_health's asyncio HealthServicer
    config: ServerConfig
    predictors: Predictors
    metrics: ServiceMetrics
    metrics_port: int | None = None  # bound /metrics port; None when metrics are off
    drain: Drain = field(default_factory=Drain)  # DispatcherService calls in flight
    loop: ServerLoop | None = None  # the server's event loop
    pool: CallPool | None = None  # the threads working on calls
    front: DecisionFront | None = None  # the decisions' threads, admission, pipeline
    stopped: bool = False  # a second stop does nothing

    @property
    def target(self) -> str:
        host = self.config.listen.rsplit(":", 1)[0]
        return f"{host}:{self.port}"

    def stop(self, grace: float | None = None) -> list[dict[str, Any]]:
        """Drain, then stop, within `grace` seconds (default grace_seconds); returns what the
        pool's threads still work on then (empty once every call has ended).

        Health turns NOT_SERVING and new decisions are answered UNAVAILABLE while the server
        still answers (probes read NOT_SERVING, not a refused connection); once no
        DispatcherService call is in flight, or the grace period is nearly over, the server
        stops: calls still open are cancelled, and get the rest of the period to end. A second
        stop returns at once.
        """
        assert self.loop is not None and self.pool is not None
        if self.stopped:
            return []
        self.stopped = True
        grace = self.config.grace_seconds if grace is None else grace
        began = time.monotonic()
        end = began + grace
        cancel_at = end - min(CANCEL_RESERVE_SECONDS, grace / 5)
        self.loop.run(self.health.enter_graceful_shutdown())
        self.drain.start()
        idle = self.drain.wait_idle(cancel_at - time.monotonic())
        log.info("drained", idle=idle, in_flight=self.drain.in_flight,
                 waited_s=round(time.monotonic() - began, 3))
        self.pool.stopping = True  # cancelled calls are not waited for beyond the period
        self.loop.run(self.server.stop(max(0.0, cancel_at - time.monotonic())))
        ended = self.pool.wait_idle(end - time.monotonic())
        left = [] if ended else self.pool.still_working()
        self.loop.close()
        self.pool.shutdown()
        self.metrics.stop_http()
        close = getattr(self.predictors, "close", None)
        if close is not None:
            close()
        return left


def start_server(config: ServerConfig) -> RunningServer:
    """Start serving in background threads; returns once the port is bound."""
    validate_config(config)
    listen_host, _, listen_port = config.listen.rpartition(":")
    check_port_free("listen", listen_host, int(listen_port))
    metrics_host = config.metrics_host or listen_host.strip("[]")
    if config.metrics_port:
        check_port_free("metrics_port", metrics_host, config.metrics_port)
    credentials = server_credentials(config)
    # The workers, and a thread for each reserve decision thread (decision_threads.py).
    pool = CallPool(config.workers + identity_reserve(config))
    metrics, drain, loop = ServiceMetrics(), Drain(), ServerLoop()
    running: RunningServer | None = None
    try:
        running = loop.run(_built(config, credentials, metrics, drain, pool))
        running.loop = loop
        if config.metrics_port:
            running.metrics_port = metrics.start_http(metrics_host, config.metrics_port,
                                                      *metrics_security(config))
        loop.run(_started(running))
    except BaseException:
        if running is not None:
            loop.run(running.server.stop(None))  # let go of the gRPC port
            metrics.stop_http()
        loop.close()
        pool.shutdown()
        raise
    freeze_long_lived(collect=True)  # modules, configuration, tables: out of collections
    log.info("serving", listen=config.listen, port=running.port, workers=config.workers,
             default_dispatcher=config.default_dispatcher, profile=config.default_profile,
             transport=tls_mode(config), metrics_port=running.metrics_port)
    return running


async def _built(config: ServerConfig, credentials: grpc.ServerCredentials | None,
                 metrics: ServiceMetrics, drain: Drain, pool: CallPool) -> RunningServer:
    """The asyncio server with its services, bound (on the server's loop)."""
    server = grpc.aio.server(
        options=_channel_options(config),
        # Outermost first. DecodeErrorInterceptor innermost: the others see (and count) its
        # refusals; the identity check (mTLS with tls_client_identities) before anything counts.
        interceptors=[
            metrics.interceptor(), RequestIdInterceptor(), *identity_interceptors(config),
            drain.interceptor(), DecodeErrorInterceptor(),
        ],
    )
    try:
        front, health_servicer = _add_services(server, config, metrics, drain, pool)
        port = _bind(server, config.listen, credentials)
    except BaseException:
        await server.stop(None)
        raise
    return RunningServer(server, port, health_servicer, config, front.predictors, metrics,
                         None, drain, None, pool, front)


async def _started(running: RunningServer) -> None:
    """Start serving; every service SERVING; the overload watch on (on the server's loop)."""
    await running.server.start()
    services = (SERVICE_NAME, SESSION_SERVICE_NAME)
    for name in ("", *services):
        await running.health.set(name, health_pb2.HealthCheckResponse.SERVING)
    assert running.loop is not None and running.front is not None
    running.loop.spawn(watch_overload(running.health, services, running.front.admitting,
                                      running.config.health_overload_seconds))


def _channel_options(config: ServerConfig) -> list[tuple[str, int]]:
    """The server's channel options: message size limits and keepalive."""
    return [
        ("grpc.max_receive_message_length", config.max_message_bytes),
        ("grpc.max_send_message_length", config.max_message_bytes),
        ("grpc.keepalive_time_ms", 60_000),
        ("grpc.keepalive_timeout_ms", 20_000),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
        # No SO_REUSEPORT: a second server on a busy port must fail, not share it silently.
        ("grpc.so_reuseport", 0),
        # What a stream's caller sent and the server has not yet taken up stays within one
        # HTTP/2 window per stream (64 KiB, and the message being read): with the
        # bandwidth-delay probe on, gRPC grows every stream's window to about 4 MiB, and a
        # caller that sends faster than its decisions are made (or never reads its answers,
        # so the server takes up nothing more) had that much buffered per stream
        # (BENCHMARKS.md §8.3). A stream answers one message at a time; it needs no more.
        ("grpc.http2.bdp_probe", 0),
    ]


def _add_services(
    server: grpc.aio.Server, config: ServerConfig, metrics: ServiceMetrics, drain: Drain,
    pool: CallPool,
) -> tuple[DecisionFront, Any]:
    """The dispatcher and session services (their calls worked on in `pool`), health and
    reflection on `server`; the plugins loaded (one that cannot be loaded is reported now).
    Returns the decision front and the health servicer."""
    predictors = open_predictors(
        store_path=config.predictor_store,
        on_store_fallback=metrics.count_predictor_store_fallback,
        limits=config.knowledge_base_limits(),
        on_predictor_failure=metrics.count_predictor_failure,
    )
    load_plugins(predictors, metrics)
    front = DecisionFront(config, predictors, metrics)
    intake = SnapshotIntake(config, predictors.kinds)
    dispatcher_service = DispatcherService(front, intake)
    sessions = SessionServicer(front, intake, drain, pool, dispatcher_service.ReportCompletions)
    services = pb.DESCRIPTOR.services_by_name
    pb_grpc.add_DispatcherServiceServicer_to_server(
        pooled(pool, dispatcher_service, services["DispatcherService"]), server)
    pb_grpc.add_SessionServiceServicer_to_server(
        pooled(pool, sessions, services["SessionService"]), server)
    # grpc_health's asyncio servicer (health.aio, imported only where asyncio is: not in stubs).
    health_servicer = health.aio.HealthServicer()  # type: ignore[attr-defined]
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (SERVICE_NAME, SESSION_SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME),
        server,
    )
    return front, health_servicer


def _bind(server: grpc.aio.Server, listen: str, credentials: grpc.ServerCredentials | None) -> int:
    """Bind `listen` (TLS when there are credentials); the port bound, or a clear OSError."""
    try:
        if credentials is None:
            port = server.add_insecure_port(listen)
        else:
            port = server.add_secure_port(listen, credentials)
    except RuntimeError as exc:  # grpcio >= 1.5x: "Failed to bind to address ..."
        raise _bind_error(listen) from exc
    if port == 0:
        raise _bind_error(listen)
    return port


def _bind_error(listen: str) -> OSError:
    """Why `listen` could not be bound: busy (raced past check_port_free) or not bindable."""
    host, _, port = listen.rpartition(":")
    try:
        check_port_free("listen", host, int(port))
    except PortInUseError as busy:
        return busy
    return OSError(f"configuration key 'listen': cannot listen on {listen} (is the host one "
                   "of this machine's addresses?)")


def metrics_security(config: ServerConfig) -> tuple[MetricsTls | None, BasicAuth | None]:
    """HTTPS and basic auth of /metrics, as configured (each None when off)."""
    tls = None
    if config.metrics_tls_cert and config.metrics_tls_key:
        tls = MetricsTls(config.metrics_tls_cert, config.metrics_tls_key,
                         config.metrics_tls_client_ca)
    auth = None
    if config.metrics_basic_auth_user and config.metrics_basic_auth_password_hash:
        auth = BasicAuth(config.metrics_basic_auth_user, config.metrics_basic_auth_password_hash)
    return tls, auth


def serve(config: ServerConfig) -> None:
    """Configure logging, serve until SIGTERM or SIGINT; then stop gracefully, and exit within
    the grace period whatever a call is doing (one still running is named, then left)."""
    configure_logging(config.log_format, config.log_level)
    running = start_server(config)
    stopping = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("stopping", signal=signal.Signals(signum).name, grace_s=config.grace_seconds)
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # Wait in short slices: Python runs a signal's handler in the main thread, and a signal
    # the kernel delivers to another thread (gRPC's, CP-SAT's) does not wake a main thread
    # blocked in an untimed wait, so SIGTERM could go unhandled for good.
    while not stopping.wait(timeout=0.2):
        pass
    stop_began = time.monotonic()
    left = running.stop()
    # A plugin's decision or prediction past its deadline still runs in its own thread: it
    # gets what is left of the grace period, then is named (exit status 1).
    plugins = calls_left_after(stop_began + config.grace_seconds - time.monotonic())
    exit_leaving(left, config.grace_seconds, plugins)
    log.info("stopped")
