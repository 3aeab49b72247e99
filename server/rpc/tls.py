"""Server transport security: TLS (tls_cert + tls_key), mutual TLS (+ tls_client_ca), and the
optional list of client identities allowed to call (tls_client_identities)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health

from ..config import ServerConfig
from .rpc_wrap import Around, AroundInterceptor, split_method

# Auth-context properties of the peer's certificate (gRPC core's names).
SAN_PROPERTY = "x509_subject_alternative_name"
CN_PROPERTY = "x509_common_name"


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


def peer_identities(auth_context: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """(SAN entries, common names) of the client certificate the handshake verified.

    `auth_context` is `ServicerContext.auth_context()`: property name -> list of byte strings
    (the type stubs say bytes).
    """

    def texts(key: str) -> list[str]:
        return [v.decode("utf-8", "replace") for v in auth_context.get(key, ())]

    return texts(SAN_PROPERTY), texts(CN_PROPERTY)


def caller_identity(context: grpc.ServicerContext) -> str:
    """Who is calling, for owning sessions: the names (SAN entries and common names, sorted) of
    the client certificate the mTLS handshake verified; "" without one (plaintext, or TLS
    without client certificates: every caller is then the same identity)."""
    sans, common_names = peer_identities(context.auth_context())
    return "\n".join(sorted(set(sans) | {f"CN={cn}" for cn in common_names}))


class ClientIdentityInterceptor(AroundInterceptor):
    """mTLS: only clients whose certificate names an allowed identity may call.

    An identity matches a subject-alternative-name entry (DNS name, URI, e-mail or IP address)
    or the subject's common name, exactly. Other clients are refused with PERMISSION_DENIED
    naming the identities their certificate carries. The gRPC health service is exempt, so that
    probes holding any certificate of the client CA still see the server's state.
    """

    exempt_services = frozenset({health.SERVICE_NAME})

    def __init__(self, allowed: Iterable[str]) -> None:
        self.allowed = frozenset(allowed)

    def around_for(self, details: grpc.HandlerCallDetails,
                   handler: grpc.RpcMethodHandler) -> Around | None:
        service, _ = split_method(details.method)
        if service in self.exempt_services:
            return None

        @asynccontextmanager
        async def around(kind: str, request: Any, context: Any) -> AsyncIterator[Any]:
            await self.check(context)
            yield request

        return around

    async def check(self, context: Any) -> None:
        sans, common_names = peer_identities(context.auth_context())
        if self.allowed.isdisjoint(sans) and self.allowed.isdisjoint(common_names):
            await context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"client certificate identity not allowed: CN {common_names or 'none'}, SAN "
                f"{sans or 'none'}; the server accepts only the identities in its "
                "tls_client_identities",
            )


def identity_interceptors(config: ServerConfig) -> list[grpc.aio.ServerInterceptor]:
    """The identity check when mTLS with tls_client_identities is configured; else none."""
    if config.tls_client_ca and config.tls_client_identities:
        return [ClientIdentityInterceptor(config.tls_client_identities)]
    return []
