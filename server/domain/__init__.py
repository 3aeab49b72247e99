"""The shared domain model: the names every room of the server speaks, defined once, below all.

What a node list, its occupancy and its free resources are, what a decision's search may do and
who asks, what a duration predictor is asked, and how an outcome is classified: `node_index`
(the node list indexed once), `occupancy` (what the running work makes of the nodes at t),
`free_pool` (free resources per node, grouped), `search_settings` and `profiles` (a search's
settings, what a request asks of them, and their named profiles), `search_control` (a
decision's deadline, allocator, cancellation and `caller_scope`), `duration_predictor` (the
predictor interface and the job facts it reads), `outcome_kinds` (solve statuses, attempt
ends, skip reasons). The lowest room: it imports nothing else of the server, nor the wire's
generated code (`server/core_wire.py` converts at the edge); the core (dispatchers,
predictors) builds on it and the rooms above the pipeline import it directly
(pyproject.toml's contracts).
"""
