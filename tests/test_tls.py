"""TLS and mutual TLS with certificates made here: who gets an answer and who is refused."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from hpcdispatch import cli
from hpcdispatch.client import DispatcherClient, channel_credentials
from hpcdispatch.server.app import RunningServer
from hpcdispatch.server.config import ServerConfig, load_config
from hpcdispatch.server.tls import server_credentials
from hpcdispatch.v1 import dispatcher_pb2 as pb
from hpcdispatch.v1 import dispatcher_pb2_grpc as pb_grpc
from tests.certificates import CertificateAuthority, Pem
from tests.observability import metrics_server, scrape_text, small_request, value


@dataclasses.dataclass(frozen=True)
class Pki:
    ca: Pem
    server: Pem
    client: Pem
    rogue_ca: Pem
    rogue_client: Pem


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    root = tmp_path_factory.mktemp("pki")
    ca = CertificateAuthority(root / "ca")
    rogue = CertificateAuthority(root / "rogue", name="someone else's CA")
    return Pki(
        ca=ca.pem,
        server=ca.issue("server", "localhost", server=True),
        client=ca.issue("client", "slurm-plugin", server=False),
        rogue_ca=rogue.pem,
        rogue_client=rogue.issue("client", "slurm-plugin", server=False),
    )


@pytest.fixture
def mtls_server(pki: Pki) -> Iterator[RunningServer]:
    with metrics_server(tls_cert=str(pki.server.cert), tls_key=str(pki.server.key),
                        tls_client_ca=str(pki.ca.cert)) as server:
        yield server


def describe(
    target: str, credentials: grpc.ChannelCredentials | None
) -> pb.DescribeServiceResponse:
    """One call without wait-for-ready: a refused handshake fails at once."""
    channel = (grpc.insecure_channel(target) if credentials is None
               else grpc.secure_channel(target, credentials))
    with channel:
        return pb_grpc.DispatcherServiceStub(channel).DescribeService(
            pb.DescribeServiceRequest(), timeout=10)


def test_mtls_client_with_a_valid_certificate_gets_decisions(
    pki: Pki, mtls_server: RunningServer
) -> None:
    credentials = channel_credentials(pki.ca.cert, pki.client.cert, pki.client.key)
    with DispatcherClient(mtls_server.target, credentials=credentials, timeout=30) as client:
        response = client.dispatch(small_request())
    assert response.starts and response.report.total_seconds > 0


@pytest.mark.parametrize("who", ["plaintext", "no client certificate", "certificate of another CA",
                                 "server not trusted"])
def test_mtls_refuses_clients_without_a_valid_certificate(
    pki: Pki, mtls_server: RunningServer, who: str
) -> None:
    credentials = {
        "plaintext": None,
        "no client certificate": channel_credentials(pki.ca.cert),
        "certificate of another CA": channel_credentials(
            pki.ca.cert, pki.rogue_client.cert, pki.rogue_client.key),
        "server not trusted": channel_credentials(
            pki.rogue_ca.cert, pki.client.cert, pki.client.key),
    }[who]
    with pytest.raises(grpc.RpcError) as caught:
        describe(mtls_server.target, credentials)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    # The call never reached the service.
    assert mtls_server.metrics_port
    text = scrape_text(mtls_server.metrics_port)
    assert value(text, "grpc_server_started_total", grpc_method="DescribeService") == 0
    # ... while a valid client on the same server is served.
    good = channel_credentials(pki.ca.cert, pki.client.cert, pki.client.key)
    assert describe(mtls_server.target, good).version


def test_tls_without_client_ca_serves_any_client_that_trusts_the_server(pki: Pki) -> None:
    with metrics_server(tls_cert=str(pki.server.cert), tls_key=str(pki.server.key)) as server:
        assert describe(server.target, channel_credentials(pki.ca.cert)).version
        with pytest.raises(grpc.RpcError) as plaintext:
            describe(server.target, None)
        assert plaintext.value.code() == grpc.StatusCode.UNAVAILABLE


def test_dispatch_command_with_tls_flags(pki: Pki, mtls_server: RunningServer,
                                         tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    out = tmp_path / "response.json"
    base = ["dispatch", "--target", mtls_server.target, "--tls-ca", str(pki.ca.cert),
            "--timeout", "20", "--output", str(out)]
    assert cli.main([*base, "--tls-cert", str(pki.client.cert),
                     "--tls-key", str(pki.client.key)]) == 0
    assert json.loads(out.read_text())["starts"]
    capsys.readouterr()
    assert cli.main([*base, "--timeout", "2"]) == 1  # no client certificate: refused
    err = capsys.readouterr().err  # the handshake fails: UNAVAILABLE, or the deadline first
    assert "UNAVAILABLE" in err or "DEADLINE_EXCEEDED" in err


def test_server_name_override_for_a_certificate_of_another_name(tmp_path: Path) -> None:
    ca = CertificateAuthority(tmp_path / "ca2")
    other = ca.issue("server", "dispatcher.internal", server=True, names=("dispatcher.internal",))
    trust = channel_credentials(ca.pem.cert)
    with metrics_server(tls_cert=str(other.cert), tls_key=str(other.key)) as server:
        with pytest.raises(grpc.RpcError) as mismatch:  # 127.0.0.1 is not in the certificate
            describe(server.target, trust)
        assert mismatch.value.code() == grpc.StatusCode.UNAVAILABLE
        override = [("grpc.ssl_target_name_override", "dispatcher.internal")]
        with DispatcherClient(server.target, credentials=trust, extra_options=override) as c:
            assert c.describe(timeout=10).version


@pytest.mark.parametrize(("keys", "message"), [
    ({"tls_cert": "a.crt"}, "tls_key"),
    ({"tls_key": "a.key"}, "tls_cert"),
    ({"tls_client_ca": "ca.crt"}, "tls_client_ca"),
    ({"tls_cert": "/nonexistent.crt", "tls_key": "/nonexistent.key"}, "cannot read"),
])
def test_incomplete_tls_settings_are_errors(keys: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        server_credentials(dataclasses.replace(ServerConfig(), **keys))


def test_tls_keys_come_from_the_environment(pki: Pki) -> None:
    config = load_config(env={
        "HPCDISPATCH_TLS_CERT": str(pki.server.cert), "HPCDISPATCH_TLS_KEY": str(pki.server.key),
        "HPCDISPATCH_TLS_CLIENT_CA": str(pki.ca.cert), "HPCDISPATCH_METRICS_PORT": "9464",
    })
    assert config.tls_client_ca == str(pki.ca.cert) and config.metrics_port == 9464
    assert server_credentials(config) is not None
    assert load_config(env={"HPCDISPATCH_TLS_CERT": ""}).tls_cert is None


def test_client_certificate_needs_its_key(pki: Pki) -> None:
    with pytest.raises(ValueError, match="key"):
        channel_credentials(pki.ca.cert, cert=pki.client.cert)
