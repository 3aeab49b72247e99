"""The contract's names on every side: the catalog, wire names, registrations, search fields."""
