"""Planning (server/dispatchers/planning/): capacity profiles, reservations, list schedules."""
