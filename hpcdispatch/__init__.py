"""hpcdispatch: an on-line HPC job dispatcher served over gRPC."""

__version__ = "0.1.0"
