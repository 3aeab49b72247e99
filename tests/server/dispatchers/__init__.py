"""The dispatchers (server/dispatchers/): baselines, registry, every decision checked."""
