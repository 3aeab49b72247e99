"""The CP dispatchers (server/dispatchers/cp/): steps, restarts, search, their disciplines."""
