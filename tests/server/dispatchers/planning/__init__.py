"""Planning (server/dispatchers/planning/): free pool, capacity profiles, reservations."""
