"""Sessions (server/sessions/): deltas, running work, store, session calls and streams."""
