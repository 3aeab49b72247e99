"""The Python client (client/): retries, deadlines, unreachable services."""
