"""Client transport security: channel credentials from PEM files."""

from __future__ import annotations

from pathlib import Path

import grpc


def channel_credentials(
    ca: str | Path | None = None, cert: str | Path | None = None, key: str | Path | None = None
) -> grpc.ChannelCredentials:
    """TLS credentials for DispatcherClient(credentials=...).

    ca: PEM bundle that signed the server's certificate (None: the system's roots).
    cert, key: the client's certificate chain and private key, for mutual TLS (both or none).
    """
    if (cert is None) != (key is None):
        raise ValueError("a client certificate needs its key, and a key its certificate")
    return grpc.ssl_channel_credentials(
        root_certificates=Path(ca).read_bytes() if ca is not None else None,
        private_key=Path(key).read_bytes() if key is not None else None,
        certificate_chain=Path(cert).read_bytes() if cert is not None else None,
    )
