"""The benchmarks, one package per question; each package's docstring says which question it
answers and which section of BENCHMARKS.md (and page of docs/benchmarks/) its figures feed.

- `qos`: is the default better than EASY, and which QoS targets does it meet? (§1, §7)
- `matrix`: do the models match the papers? Campaigns of replays, dispatchers × predictors
  (§2); the campaigns' settings are the YAML files of `benchmarks/campaigns/`.
- `decision_cost`: what does a decision cost on paper-size snapshots, and the predictor's
  share of it? (§3.1, §3.3)
- `same_instances`: every dispatcher on the same captured instances (§3.2).
- `scale`: what does a decision cost at scale, whole snapshots and sessions? (§4)
- `speed`: how fast are replays, and what does a session call's transport cost? (§5)
- `service`: what does the running service do under overload, with what callers send, by
  their deadlines? (§6, §8)

A new benchmark goes in the package of the question it answers (a module run as
`python -m benchmarks.PACKAGE.MODULE`, its command in BENCHMARKS.md's *Commands* table); a new
question gets a package of its own, with its docstring, and a section of BENCHMARKS.md. What a
benchmark may import of the server is the contract "the benchmarks use the server's public
doors" of pyproject.toml. Results worth keeping go under `benchmarks/results/`.
"""
