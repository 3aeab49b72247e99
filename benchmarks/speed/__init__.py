"""How fast are replays, and what does a session call's transport cost?

BENCHMARKS.md §5 (docs/benchmarks/replay-speed.md).

- `replay_throughput`: each replay's whole-process CPU, jobs per CPU-second, gRPC and
  in-process paths and another checkout's side by side, every `jobs.csv` compared (§5.1, §5.3,
  §5.4); `plain_easy`: its yardstick, a plain event-driven EASY on processor counts;
- `session_transport`: CPU and context switches per round trip of a session call and of a
  session stream's message (§5.4);
- `stream_encoding`: the protobuf a session stream adds to each decision, timed apart beside
  the in-process decision (§5.6);
- `identical_outputs`: every dispatcher's jobs.csv at two commits, each exported and replayed
  from its own tree, compared column by column (§5.6);
- `thread_cpu`: a replay's CPU by thread (simulator, gRPC client, server loop, pool) (§5.6);
- `paired_cpu`: one replay at two commits in alternating pairs, the median of the pairs' CPU
  ratios, for changes smaller than a loaded machine's run-to-run noise (§5.7).
"""
