"""What does one decision cost, and what part of it is the duration predictor's?

BENCHMARKS.md §3.1 and §3.3 (docs/benchmarks/decision-cost.md); §3.2, every dispatcher on the
same captured instances, is `benchmarks.same_instances`, and decisions at 10,000 to 100,000
nodes are `benchmarks.scale` (§4).

- `snapshot_decisions`: decision time and model size of every dispatcher on KIT-size and
  Eurora-size snapshots, `fast` against `papers` (§3.1);
- `predictor_cost`: the predictor's share of a decision at 10,000 running jobs, one query per
  job against the batched index, on SQLite and PostgreSQL (§3.3).
"""
