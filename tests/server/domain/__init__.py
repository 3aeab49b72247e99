"""The shared domain model (server/domain/): free pool, occupancy, the names every room speaks."""
