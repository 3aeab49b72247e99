"""A busy port is refused with a message naming its key, never shared (issue #23, item 1).

gRPC binds with SO_REUSEPORT unless told not to: a second `hpcdispatch serve` on the port of a
running one used to start without a word, and calls were split between the two servers.
"""

from __future__ import annotations

import dataclasses
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from hpcdispatch.server.config import load_config
from hpcdispatch.server.rpc.app import PortInUseError, RunningServer, start_server
from tests.observability import free_port

CLI = [sys.executable, "-m", "hpcdispatch"]


@pytest.fixture
def first_server() -> Iterator[RunningServer]:
    """A real server on loopback with /metrics on, as an operator's old server."""
    config = dataclasses.replace(load_config(env={}), listen="127.0.0.1:0",
                                 metrics_port=free_port())
    running = start_server(config)
    try:
        yield running
    finally:
        running.stop(grace=0.5)


def serve(*flags: str) -> subprocess.CompletedProcess[str]:
    """`hpcdispatch serve FLAGS` as a process; a server that starts is killed after 30 s
    (subprocess.TimeoutExpired: the test fails)."""
    return subprocess.run([*CLI, "serve", "--log-format", "json", *flags],
                          capture_output=True, text=True, timeout=30)


def assert_clean_refusal(done: subprocess.CompletedProcess[str], key: str, port: int) -> None:
    assert done.returncode == 2, done.stderr
    assert f"configuration key '{key}': 127.0.0.1:{port} is already in use" in done.stderr
    assert "choose a free port" in done.stderr
    assert "Traceback" not in done.stderr
    assert "chttp2" not in done.stderr  # no C-core log line
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_second_serve_on_the_grpc_port_of_a_running_server_is_refused(
    first_server: RunningServer,
) -> None:
    done = serve("--listen", f"127.0.0.1:{first_server.port}")
    assert_clean_refusal(done, "listen", first_server.port)
    assert "--listen" in done.stderr


def test_a_second_serve_on_the_metrics_port_of_a_running_server_is_refused(
    first_server: RunningServer,
) -> None:
    assert first_server.metrics_port is not None
    done = serve("--listen", "127.0.0.1:0", "--metrics-port", str(first_server.metrics_port))
    assert_clean_refusal(done, "metrics_port", first_server.metrics_port)
    assert "--metrics-port" in done.stderr


@pytest.mark.parametrize("key", ["listen", "metrics_port"])
def test_a_port_held_by_another_program_is_refused(key: str) -> None:
    with socket.socket() as other:  # any program listening, without SO_REUSEPORT
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        flags = (["--listen", f"127.0.0.1:{port}"] if key == "listen"
                 else ["--listen", "127.0.0.1:0", "--metrics-port", str(port)])
        done = serve(*flags)
    assert_clean_refusal(done, key, port)


def test_start_server_on_a_busy_port_raises_port_in_use(first_server: RunningServer) -> None:
    config = dataclasses.replace(first_server.config, listen=f"127.0.0.1:{first_server.port}",
                                 metrics_port=None)
    with pytest.raises(PortInUseError) as raised:
        start_server(config)
    assert raised.value.key == "listen"
    # The old server still answers alone.
    with socket.create_connection(("127.0.0.1", first_server.port), timeout=5):
        pass


def test_the_grpc_server_does_not_ask_for_so_reuseport() -> None:
    """Even past the bind check (a race), gRPC must not share the port: with SO_REUSEPORT
    off, a listener that set it too cannot join."""
    config = dataclasses.replace(load_config(env={}), listen="127.0.0.1:0")
    running = start_server(config)
    try:
        with socket.socket() as joiner:
            joiner.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            with pytest.raises(OSError):
                joiner.bind(("127.0.0.1", running.port))
    finally:
        running.stop(grace=0.5)
