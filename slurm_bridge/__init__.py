"""The Slurm bridge: which of Slurm's pending jobs start now, as hpcdispatch decides.

Takes the contract's names from `hpcdispatch` (catalog, snapshot), never from the server.
`bridge` (the loop: read Slurm, ask the service, pin and release, reconcile), `slurm_cli` /
`slurm_json` (Slurm's commands and their JSON), `snapshot_builder` and `job_units` (Slurm's
jobs as a snapshot), `metrics`, `cli` (`hpcdispatch slurm-bridge`).
"""
