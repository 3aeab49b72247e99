"""The hpcdispatch gRPC service."""
