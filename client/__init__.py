"""Python client of the hpcdispatch service, for workload-manager plugins and tools."""

from hpcdispatch.client.client import DEFAULT_MAX_MESSAGE_BYTES, DispatcherClient

__all__ = ["DEFAULT_MAX_MESSAGE_BYTES", "DispatcherClient"]
