"""Python client of the hpcdispatch service, for workload-manager plugins and tools."""

from .client import DEFAULT_MAX_MESSAGE_BYTES, DispatcherClient, ServiceUnreachable
from .session import DispatchSession
from .tls import channel_credentials

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "DispatchSession", "DispatcherClient",
           "ServiceUnreachable", "channel_credentials"]
