"""Is the default dispatcher better than EASY, and which QoS targets does it meet?

BENCHMARKS.md §1 (docs/benchmarks/default-vs-easy.md) and the QoS rows of §7
(docs/benchmarks/targets.md): issues #13's, #24's, #34's and #41's targets, judged on replays
run side by side with every baseline, per case (trace and system) and predictor.

- `targets`: the command (`python -m benchmarks.qos.targets`): runs the cases' replays as
  campaign cells (`benchmarks.matrix`), or reads earlier runs (`--from`), and prints each
  target met / missed; `cases` (the cases and the baselines), `verdicts` (the judging),
  `tables` (`qos.md`, `qos.json`), `frontier_plot` (bounded slowdown against longest wait);
- `frontier`: issue #41's command (`python -m benchmarks.qos.frontier`): the promise book's
  ladder against every classical rule on every pair, resumable; `ladder_verdicts` (dominance,
  the default rung, decision time), `frontier_tables` (`frontier.md`, `frontier.json`),
  `ladder_plot` (one plot per pair); §1.5 of docs/benchmarks/default-vs-easy.md;
- `profile_variant`: one replay with a profile's settings changed, before it earns a profile;
- `modes`: `qos` against the book's default rung pair by pair, from the committed campaigns
  (issue #49: why `qos` is kept beside the default; `results/qos/modes.md`);
- why a run misses: `idle_capacity` (idle while a queued job would fit), `wait_chain` (the
  jobs that held a late job's nodes), `waits_by_width` (who waits longer, by job width).

A new QoS benchmark (a frontier, a new target, a new way to explain a miss) goes here, as a
module with its command in BENCHMARKS.md's *Commands* table and its figures in §1.
"""
