"""Trace replays: how a dispatcher does on a workload trace, through the service's contract.

Takes the contract's names from `hpcdispatch` (catalog, snapshot), never from the server, but
for two imports: `adapter` starts the embedded server, `in_process_backend` calls
`server/in_process.py`. Main modules: `simulator` (event-driven replay), `replay`, `swf` /
`workload` (traces), `stream_backend` / `in_process_backend`, `outputs`, `report`, `cli`.
"""
