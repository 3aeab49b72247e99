"""Sessions: what a caller's cluster looks like between decisions, changed only by deltas.

Below the gRPC edge, above intake, pipeline and config (no wire, neither grpc nor
`hpcdispatch.v1`, and no core: the domain model from `domain/`): `state` (one session's nodes
and jobs), `running_work`, `resend` (a safe resend of UpdateSession), `store` (the server's
sessions, and why an id names none: `GoneReason`), `heap`. A delta is checked before it
applies by the intake (`intake/session_delta.py`); the edge answers in the wire's terms.
"""
