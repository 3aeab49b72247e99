"""The gRPC edge (server/rpc/): servicers, admission, errors, TLS, metrics, logs, serving."""
