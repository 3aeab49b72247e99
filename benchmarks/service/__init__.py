"""What does the running service do under overload, with what callers send, and by their
deadlines?

BENCHMARKS.md §6 (docs/benchmarks/overload.md) and §8
(docs/benchmarks/what-the-service-keeps.md); each runs a real server in a process of its own.

- `overload`: goodput of a server offered 4× what it can decide (§6);
- `knowledge_base_memory`: the server's RSS per reported completion and per cluster name
  (§8.1);
- `conservative_deadline`: whether conservative decisions answer by the caller's deadline
  (§8.2);
- `unread_streams`: the server's RSS with 20 and 200 session streams whose client never reads
  its answers (§8.3).
"""
