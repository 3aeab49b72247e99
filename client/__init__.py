"""Python client of the hpcdispatch service, for workload-manager plugins and tools."""

from hpcdispatch.client.client import DEFAULT_MAX_MESSAGE_BYTES, DispatcherClient
from hpcdispatch.client.session import DispatchSession
from hpcdispatch.client.tls import channel_credentials

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "DispatchSession", "DispatcherClient",
           "channel_credentials"]
