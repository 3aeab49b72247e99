"""The CP dispatchers: how HCP'19, PCP'19 and PCP'20 decide with a CP-SAT model at t.

Imports only `dispatchers.base`, `search_settings` and `planning/` below it (and OR-Tools):
`cp_dispatch` (the shared dispatcher) runs `decision_steps` over a `decision`; `formulation`
and `cp_schedule` build the model, `restart_policy` / `cpsat_attempt` / `policy_attempt` run
the solver; `hcp19`, `pcp19`, `pcp20` are the models; `promise_decision` the promise book's.
"""
