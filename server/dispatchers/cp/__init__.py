"""The CP dispatchers: how HCP'19, PCP'19 and PCP'20 decide with a CP-SAT model at t.

Imports only `dispatchers.base` and `table_row`, and `planning/` and `domain/` below them (and
OR-Tools): `cp_dispatch` (the shared dispatcher) runs `decision_steps` over a `decision` (the
state its steps share), `promise_steps` the promise book's steps; `formulation` and
`cp_schedule` build the model, `restart_policy` / `cpsat_attempt` / `policy_attempt` run the
solver; `hcp19`, `pcp19`, `pcp20` are the models; `model_variables` the size of the model a
dispatcher would search (the pipeline's door to it, which imports it, and OR-Tools, only when
asked).
"""
