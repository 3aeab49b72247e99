"""The gRPC edge: how a call on the wire becomes a decision and its answer.

The top room, and the only code that imports grpc; it may import sessions, intake, pipeline
and config, but not the dispatchers or predictors (the pipeline is the one door). Main modules:
`app` (the server), `dispatch_service` and `session_service` / `session_stream` (the
servicers), `decision_front`, `admission`, `draining`, `errors`, `metrics`, `tls`, `embedded`.
"""
