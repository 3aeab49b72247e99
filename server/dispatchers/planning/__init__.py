"""Planning: what can run where and when, without a solver, for every dispatcher above it.

The dispatchers' lowest room (imports only `hpcdispatch.snapshot`, the contract and itself):
`problem` (the instance), `free_pool` and `capacity_profile` / `node_profile` (free capacity now
and over time), `reservation` (EASY's head), `greedy_schedule` / `list_orders` (list
schedules), `job_selection` (the model's window), `plan`, `promises`, `stopping`.
"""
