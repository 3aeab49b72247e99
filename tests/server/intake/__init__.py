"""Request validation and conversion (server/intake/): snapshot intake, node table."""
