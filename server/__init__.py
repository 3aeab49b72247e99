"""The hpcdispatch gRPC service, in rooms whose imports point down.

- `rpc/`: the gRPC edge, the only code that imports grpc (both servicers, admission, draining,
  errors, interceptors, TLS, metrics, the app, the embedded server).
- `in_process.py`: beside `rpc/`, the same decisions without the wire, in the caller's process
  (trace replays: `hpcdispatch simulate --in-process`).
- `sessions/`: a session's state (deltas, running work, state, store).
- `intake/`: request validation and conversion, the node table, the running-job cache.
- `pipeline.py`: the one door into the core (predict → problem → dispatch → independent
  check → fallback), exporting only its own names; then `config.py`.
- the core: `dispatchers/` (baselines and registry on top; `cp/` the CP models, CP-SAT
  machinery and restart policy; `planning/` the problem, capacity profiles, reservations,
  list schedules) and `predictors/`.
- `domain/`: the shared domain model, below all (node index, occupancy, free pool, search
  settings and profiles, search control, the duration predictor's interface).

The rule: rpc | in_process > sessions > intake > pipeline > config > dispatchers | predictors >
domain; the rooms above the pipeline reach the core through it alone and take the domain's
names directly; nothing under `dispatchers/` or `domain/` imports the rest of the server;
the client side (`client/`, `slurm_bridge/`, `sim_adapter/`) takes the contract's names from
`hpcdispatch.catalog`, not from here (but for the replay adapter's embedded server and
in-process path). Enforced by the import-linter contracts in pyproject.toml
(`[tool.importlinter]`), run by `scripts/typecheck.sh` in CI.
"""
