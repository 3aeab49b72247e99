"""Intake: is a request valid, and what is it in the pipeline's terms.

Below sessions, above pipeline and config (no grpc, no core: the domain model from `domain/`):
`snapshot_intake` (a full snapshot checked and converted in one pass), `validation` /
`violations` / `limits` (what is wrong, by field path), `decision_options`, `node_table` and
`running_job_cache` (converted once, reused), `interruption`, `shown`.
"""
