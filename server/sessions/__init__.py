"""Sessions: what a caller's cluster looks like between decisions, changed only by deltas.

Below the gRPC edge, above intake, pipeline and config (no grpc, no core: the domain model from
`domain/`): `state` (one session's nodes and jobs), `delta` (checking a delta before it
applies), `running_work`, `resend` (a safe resend of UpdateSession), `store` (the server's
sessions), `heap`.
"""
