"""Planning: what can run where and when, without a solver, for every dispatcher above it.

The dispatchers' lowest room (imports only `hpcdispatch.snapshot`, the domain model `domain/`
and itself): `problem` (the instance), `capacity_profile` (free capacity over time, pooled) /
`node_profile` (the planner: what is free when, per node), `reservation` (EASY's head),
`later_reservations`, `processor_packing` (LOS's), `oldest_first` (EASY's head discipline
in a CP decision), `job_orders` / `greedy_schedule` / `list_orders` / `node_schedule` (list
schedules), `job_selection` (the model's window), `plan`, `left_shift`, `work_conservation`,
`starvation_guard`, `protected_room` / `pooled_tests` (what a decision protects), `promises` /
`promise_room` / `start_pools` / `start_estimates` / `caller_scope` (the promise book),
`stopping`.
"""
