"""The server's rooms (server/), one folder each (docs/architecture.md)."""
