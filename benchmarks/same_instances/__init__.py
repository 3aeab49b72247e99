"""How do the dispatchers compare on the very same instances? (the 2020 paper's Figures 6, 7)

BENCHMARKS.md §3.2 (docs/benchmarks/decision-cost.md), results in
`benchmarks/results/same_instances.*`; run as `python -m benchmarks.same_instances`.

- `compare`: the command: capture, send every instance to every dispatcher, report;
- `capture`: instances saved from a replay; `sources`: the trace slices and synthetic sets;
- `run`: one row per instance, dispatcher and profile; `report`: per-instance ratios, the
  Markdown summary and the plots; `model_size`: a CP model's size built in-process.
"""
