"""Test certificates made with `cryptography`: a CA, a server certificate, client certificates."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pem:
    cert: Path
    key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write(directory: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
           ) -> Pem:
    directory.mkdir(parents=True, exist_ok=True)
    pem = Pem(directory / f"{stem}.crt", directory / f"{stem}.key")
    pem.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.key.write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ))
    return pem


def _general_name(name: str) -> x509.GeneralName:
    """An IP address, a URI (has "://", e.g. a SPIFFE id) or a DNS name."""
    if "://" in name:
        return x509.UniformResourceIdentifier(name)
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


class CertificateAuthority:
    """A self-signed CA that issues server and client certificates into `directory`."""

    def __init__(self, directory: Path, name: str = "hpcdispatch test CA") -> None:
        self.directory = directory
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name)).issuer_name(_name(name))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.pem = _write(directory, "ca", self.cert, self.key)

    def issue(
        self, stem: str, common_name: str, *, server: bool,
        names: tuple[str, ...] | None = None, client_too: bool = False,
    ) -> Pem:
        """A leaf certificate with subject CN `common_name` and subject alternative `names`
        (DNS names, IP addresses or URIs); server ones default to localhost and 127.0.0.1,
        client ones to no alternative name. `client_too`: a server certificate that is also
        valid for client authentication (extended key usage serverAuth + clientAuth), as many
        internal CAs issue them."""
        if names is None:
            names = ("localhost", "127.0.0.1") if server else ()
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usages = [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
        if server and client_too:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name)).issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        if names:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([_general_name(n) for n in names]), critical=False)
        return _write(self.directory, stem, builder.sign(self.key, hashes.SHA256()), key)


def two_client_pki(root: Path) -> dict[str, Path]:
    """A CA, a server certificate for localhost and client certificates of the identities alice
    and bob: paths by name (`ca`, `server_cert`, `server_key`, `alice_cert`, `alice_key`,
    `bob_cert`, `bob_key`)."""
    ca = CertificateAuthority(root / "ca")
    server = ca.issue("server", "localhost", server=True)
    alice = ca.issue("alice", "alice", server=False)
    bob = ca.issue("bob", "bob", server=False)
    return {"ca": ca.pem.cert, "server_cert": server.cert, "server_key": server.key,
            "alice_cert": alice.cert, "alice_key": alice.key, "bob_cert": bob.cert,
            "bob_key": bob.key}
