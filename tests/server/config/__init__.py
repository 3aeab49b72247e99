"""The server's configuration (server/config.py)."""
