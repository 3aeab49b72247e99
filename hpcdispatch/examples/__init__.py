"""Bundled example data: what a snapshot looks like, to try the service without a cluster.

`eurora_snapshot.json`, read as package data (no Python here) by `hpcdispatch dispatch`
without a SNAPSHOT argument (`hpcdispatch/cli.py`).
"""
