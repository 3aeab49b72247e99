"""The shared domain model: the names every room of the server speaks, defined once, below all.

What a node list, its occupancy and its free resources are, what a decision's search may do and
who asks, and what a duration predictor is asked: `node_index` (the node list indexed once),
`occupancy` (what the running work makes of the nodes at t), `free_pool` (free resources per
node, grouped), `search_settings` and `profiles` (a search's settings and their named
profiles), `search_control` (a decision's deadline, allocator, cancellation and
`caller_scope`), `duration_predictor` (the predictor interface and the job facts it reads).
The lowest room: it imports nothing else of the server; the core (dispatchers, predictors)
builds on it and the rooms above the pipeline import it directly (pyproject.toml's contracts).
"""
