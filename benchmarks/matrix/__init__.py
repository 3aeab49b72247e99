"""Do the models match the papers? Every dispatcher under every predictor, replay by replay.

BENCHMARKS.md §2 (docs/benchmarks/models-vs-papers.md): campaigns of trace replays, traces ×
systems × predictors × dispatchers (× search profiles), run in parallel on Dask, each cell's
ratio to the EASY cell of the same trace, system and predictor. The campaigns' settings are the
YAML files of `benchmarks/campaigns/`; the QoS targets (`benchmarks.qos`) run their replays as
cells of this package too.

- `campaign`: the command (`python -m benchmarks.matrix.campaign --config FILE.yaml`);
- `cells`: what a worker runs, one replay (sent to the workers by value: it imports nothing
  from `benchmarks`);
- `report`: ratios to EASY, `campaign.json` and `campaign.md`, merging campaigns run apart;
- `plot`: the papers' Figures 4–5 style plots of a campaign.
"""
