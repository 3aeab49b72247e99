"""TLS and mutual TLS with certificates made here: who gets an answer and who is refused."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from hpcdispatch import cli
from hpcdispatch.client import DispatcherClient, channel_credentials
from hpcdispatch.server.config import ServerConfig, load_config
from hpcdispatch.server.rpc.app import RunningServer
from hpcdispatch.server.rpc.tls import server_credentials
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
    authority: CertificateAuthority  # issues more certificates of `ca`


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
        authority=ca,
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
            pb.DescribeServiceRequest(), timeout=120)


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
            assert c.describe(timeout=120).version


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


ALLOWED_IDENTITIES = ("slurm-plugin", "spiffe://hpc.example/bridge", "sim.hpc.example")


@pytest.fixture(scope="module")
def dual_use_server_cert(pki: Pki) -> Pem:
    """A server certificate also valid for client authentication, as many internal CAs issue."""
    return pki.authority.issue("dual-server", "localhost", server=True, client_too=True)


@pytest.fixture(scope="module")
def identity_server(pki: Pki, dual_use_server_cert: Pem) -> Iterator[RunningServer]:
    with metrics_server(tls_cert=str(dual_use_server_cert.cert),
                        tls_key=str(dual_use_server_cert.key), tls_client_ca=str(pki.ca.cert),
                        tls_client_identities=ALLOWED_IDENTITIES) as server:
        yield server


def _client_of(pki: Pki, stem: str, common_name: str,
               names: tuple[str, ...] = ()) -> grpc.ChannelCredentials:
    """Credentials with a certificate of the test CA naming `common_name` and `names`."""
    pem = pki.authority.issue(stem, common_name, server=False, names=names)
    return channel_credentials(pki.ca.cert, pem.cert, pem.key)


@pytest.mark.parametrize(("common_name", "names"), [
    ("slurm-plugin", ()),  # the CN is allowed
    ("bridge-7", ("spiffe://hpc.example/bridge",)),  # a URI SAN is allowed
    ("simulator", ("other.hpc.example", "sim.hpc.example")),  # one DNS SAN is allowed
])
def test_allowed_client_identities_are_served(
    pki: Pki, identity_server: RunningServer, common_name: str, names: tuple[str, ...],
) -> None:
    credentials = _client_of(pki, "allowed", common_name, names)
    assert describe(identity_server.target, credentials).version


def test_a_certificate_of_the_client_ca_with_another_identity_is_permission_denied(
    pki: Pki, identity_server: RunningServer
) -> None:
    intruder = _client_of(pki, "intruder", "intruder", ("intruder.hpc.example",))
    with pytest.raises(grpc.RpcError) as caught:
        describe(identity_server.target, intruder)
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED  # type: ignore[attr-defined]
    details = caught.value.details()  # type: ignore[attr-defined]
    assert "intruder" in details and "tls_client_identities" in details
    with grpc.secure_channel(identity_server.target, intruder) as channel:
        with pytest.raises(grpc.RpcError) as dispatch:
            pb_grpc.DispatcherServiceStub(channel).Dispatch(small_request(), timeout=120)
        assert dispatch.value.code() == grpc.StatusCode.PERMISSION_DENIED  # type: ignore[attr-defined]
        # Health stays open to any certificate of the client CA (probes).
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=120)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_the_servers_own_certificate_is_not_a_client_identity(
    pki: Pki, dual_use_server_cert: Pem, identity_server: RunningServer
) -> None:
    """Without tls_client_identities any certificate of the client CA is accepted, even the
    server's own (signed by the same CA); with them, it is refused."""
    own = channel_credentials(pki.ca.cert, dual_use_server_cert.cert, dual_use_server_cert.key)
    with metrics_server(tls_cert=str(dual_use_server_cert.cert),
                        tls_key=str(dual_use_server_cert.key),
                        tls_client_ca=str(pki.ca.cert)) as without_identities:
        assert describe(without_identities.target, own).version
    with pytest.raises(grpc.RpcError) as caught:
        describe(identity_server.target, own)
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED  # type: ignore[attr-defined]
    assert "localhost" in caught.value.details()  # type: ignore[attr-defined]
