"""Server transport security: TLS (tls_cert + tls_key) and mutual TLS (+ tls_client_ca)."""

from __future__ import annotations

from pathlib import Path

import grpc

from hpcdispatch.server.config import ServerConfig


def _read(key: str, path: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"configuration key {key!r}: cannot read {path}: {exc}") from exc


def server_credentials(config: ServerConfig) -> grpc.ServerCredentials | None:
    """None for plaintext; TLS credentials; with a client CA, clients must present a
    certificate it signed (require_client_auth)."""
    if not (config.tls_cert or config.tls_key):
        if config.tls_client_ca:
            raise ValueError("configuration key 'tls_client_ca' needs tls_cert and tls_key")
        return None
    if not (config.tls_cert and config.tls_key):
        raise ValueError("TLS needs both configuration keys 'tls_cert' and 'tls_key'")
    pair = (_read("tls_key", config.tls_key), _read("tls_cert", config.tls_cert))
    if config.tls_client_ca:
        return grpc.ssl_server_credentials(
            [pair], root_certificates=_read("tls_client_ca", config.tls_client_ca),
            require_client_auth=True,
        )
    return grpc.ssl_server_credentials([pair])


def tls_mode(config: ServerConfig) -> str:
    """"plaintext", "tls" or "mtls" (for the start-up log line)."""
    if not config.tls_cert:
        return "plaintext"
    return "mtls" if config.tls_client_ca else "tls"
