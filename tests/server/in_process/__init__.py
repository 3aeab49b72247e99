"""Decisions called in the caller's process (server/in_process.py)."""
