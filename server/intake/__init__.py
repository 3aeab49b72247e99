"""Intake: is a request valid, and what is it in the pipeline's terms.

Below sessions, above pipeline and config (no grpc, no core: the domain model from `domain/`):
`snapshot_intake` (a full snapshot checked and converted in one pass); `session_delta` (a
session's delta checked against its state before it applies); `validation` (the
reference: the order of a snapshot's checks); one home per part of a request, each rule's
limit and validity together: `fields` (texts, maps of resource types), `nodes`, `jobs`,
`decision_options` and `completions`; `violations` (what is wrong, by field path);
`node_table` and `running_job_cache` (converted once, reused), `interruption`, `shown`. The
calls go one way: snapshot_intake | session_delta > validation > completions > jobs > nodes |
decision_options > fields (pyproject.toml's contract "intake: ...").
"""
