"""What does a decision cost at scale, 64 to 100,000 nodes, with whole snapshots and sessions?

BENCHMARKS.md §4 (docs/benchmarks/decision-cost-at-scale.md); run as `python -m
benchmarks.scale` (whole snapshots) or `python -m benchmarks.scale --sessions` (§4.2).

- `snapshots`: the command: decision time and model size against node count, over gRPC;
- `sessions`: session decisions next to full-snapshot Dispatch, and an older commit's server
  beside (`baseline_server`: a commit's service started from `git archive`);
- in-process, to see where the time goes: `session_profile` (a session decision under
  cProfile) and `request_stages` (Dispatch's request side, stage by stage);
- `decide_at_scale`: one in-process decision per system size and dispatcher, each in its own
  process under a memory cap (the promise book and conservative at 10,000 and 100,000 nodes,
  §4.4);
- `site_rules_cost`: one decision of the same snapshot plain, with 8 partitions and feature
  constraints, and with a maintenance window too: the rules' cost as a ratio (issue #50);
  `cp_site_rules`: the same for the three CP models' own build and solve, in-process;
- `capped_child`: one call in a child process under a memory cap, for the two above that
  run each case so.
"""
