"""A client that cannot reach a service fails fast, naming the target and the likely cause
(issue #23, item 2): nothing listening, a host that does not resolve, plaintext against TLS,
TLS against plaintext, a missing client certificate. It used to wait out the whole deadline
and say only `DEADLINE_EXCEEDED: Deadline Exceeded`."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from hpcdispatch.client import DispatcherClient, ServiceUnreachable, channel_credentials
from hpcdispatch.server.rpc.app import RunningServer
from tests.certificates import CertificateAuthority, Pem
from tests.observability import free_port, metrics_server, small_request

CLI = [sys.executable, "-m", "hpcdispatch"]
# The failures used to wait out the whole deadline and end DEADLINE_EXCEEDED; failing fast
# shows as UNAVAILABLE with the cause, whatever the machine's load.
DEADLINE = 120.0


@dataclasses.dataclass(frozen=True)
class Pki:
    ca: Pem
    server: Pem
    client: Pem


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    ca = CertificateAuthority(tmp_path_factory.mktemp("pki") / "ca")
    return Pki(ca.pem, ca.issue("server", "localhost", server=True),
               ca.issue("client", "slurm-plugin", server=False))


@pytest.fixture(scope="module")
def mtls_server(pki: Pki) -> Iterator[RunningServer]:
    with metrics_server(tls_cert=str(pki.server.cert), tls_key=str(pki.server.key),
                        tls_client_ca=str(pki.ca.cert)) as server:
        yield server


@pytest.fixture(scope="module")
def tls_server(pki: Pki) -> Iterator[RunningServer]:
    with metrics_server(tls_cert=str(pki.server.cert), tls_key=str(pki.server.key)) as server:
        yield server


@pytest.fixture(scope="module")
def plaintext_server() -> Iterator[RunningServer]:
    with metrics_server() as server:
        yield server


def dispatch_command(target: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "dispatch", "--target", target, *flags], capture_output=True,
                          text=True, timeout=300)


def test_nothing_listening_is_unavailable_at_once_with_the_target() -> None:
    target = f"127.0.0.1:{free_port()}"
    # Failing fast is the status itself: waiting out the deadline would end DEADLINE_EXCEEDED.
    with DispatcherClient(target, timeout=DEADLINE) as client, pytest.raises(
        ServiceUnreachable
    ) as e:
        client.dispatch(small_request())
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE
    assert f"cannot reach an hpcdispatch service at {target}: nothing is listening there" in (
        e.value.details())
    assert isinstance(e.value, grpc.RpcError)  # callers catching grpc.RpcError still do


def test_a_host_that_does_not_resolve_is_named() -> None:
    with DispatcherClient("no-such-host.invalid:50051", timeout=DEADLINE) as client, pytest.raises(
        ServiceUnreachable, match="the host name does not resolve"
    ):
        client.describe()


@pytest.mark.parametrize(
    ("server", "tls", "cause"),
    [
        ("nothing", "", "nothing is listening there"),
        ("mtls", "", "speaks TLS: give --tls-ca"),
        ("mtls", "ca-only", "it most likely requires a client certificate"),
        ("plaintext", "ca-only", "the server does not speak TLS there"),
    ],
)
def test_dispatch_command_fails_fast_with_the_likely_cause(
    request: pytest.FixtureRequest, pki: Pki, server: str, tls: str, cause: str
) -> None:
    if server == "nothing":
        target = f"127.0.0.1:{free_port()}"
    else:
        running: RunningServer = request.getfixturevalue(f"{server}_server")
        target = running.target
    flags = ["--tls-ca", str(pki.ca.cert)] if tls else []
    done = dispatch_command(target, *flags)
    assert done.returncode == 1, done.stderr
    assert (f"hpcdispatch dispatch: UNAVAILABLE: cannot reach an hpcdispatch service at "
            f"{target}: ") in done.stderr
    assert cause in done.stderr
    assert "DEADLINE_EXCEEDED" not in done.stderr and "Traceback" not in done.stderr


def test_a_reachable_service_still_answers(pki: Pki, mtls_server: RunningServer,
                                           tmp_path: Path) -> None:
    credentials = channel_credentials(pki.ca.cert, pki.client.cert, pki.client.key)
    with DispatcherClient(mtls_server.target, credentials=credentials, timeout=DEADLINE) as client:
        assert client.dispatch(small_request()).starts
    done = dispatch_command(mtls_server.target, "--tls-ca", str(pki.ca.cert), "--tls-cert",
                               str(pki.client.cert), "--tls-key", str(pki.client.key),
                               "--output", str(tmp_path / "decision.json"))
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("server", ["tls", "mtls"])
def test_a_plaintext_client_of_a_tls_server_on_localhost_is_told_it_speaks_tls(
        request: pytest.FixtureRequest, server: str) -> None:
    """localhost is ::1 and 127.0.0.1: gRPC named the refused ::1, and the command said
    "nothing is listening there" (issue #51)."""
    running: RunningServer = request.getfixturevalue(f"{server}_server")
    port = running.target.rsplit(":", 1)[1]  # the server listens on 127.0.0.1 only
    done = dispatch_command(f"localhost:{port}")
    assert done.returncode == 1, done.stderr
    assert (f"hpcdispatch dispatch: UNAVAILABLE: cannot reach an hpcdispatch service at "
            f"localhost:{port}: the server at 127.0.0.1:{port} speaks TLS: give --tls-ca, "
            "and --tls-cert / --tls-key if it requires client certificates") in done.stderr
    assert "nothing is listening" not in done.stderr and "Traceback" not in done.stderr


def test_a_plaintext_client_of_something_else_is_told_it_is_not_a_service() -> None:
    """A listener that closes every connection: neither TLS nor gRPC."""
    import socket
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def close_each() -> None:
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            connection.close()

    threading.Thread(target=close_each, daemon=True).start()
    try:
        done = dispatch_command(f"127.0.0.1:{port}")
    finally:
        listener.close()
    assert done.returncode == 1, done.stderr
    assert (f"at 127.0.0.1:{port}: something listens at 127.0.0.1:{port} but closed the "
            "connection: not an hpcdispatch service") in done.stderr
