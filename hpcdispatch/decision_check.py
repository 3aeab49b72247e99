"""Independent check of a dispatching decision against its snapshot.

It shares no code with the models that produce decisions: it recomputes node usage from the
snapshot's running allocations and adds each started unit's request. A decision that fails here
must never be returned (service) or applied (simulator, Slurm bridge).
"""

from __future__ import annotations

from collections import Counter

from hpcdispatch.snapshot import Decision, NodeState, Snapshot


def check_decision(snapshot: Snapshot, decision: Decision) -> list[str]:
    """Return every violation of the decision; an empty list means the decision is valid."""
    problems: list[str] = []
    nodes = {n.id: n for n in snapshot.nodes}
    queued = {j.id: j for j in snapshot.queued}
    # Usage of the nodes the decision touches: running allocations plus the started units.
    touched = {n for start in decision.starts for n in start.nodes if n in nodes}
    used: dict[str, Counter[str]] = {n: Counter() for n in touched}
    for running in snapshot.running:
        for unit in running.units:
            if unit.node_id in touched:
                used[unit.node_id].update(unit.amounts)

    seen: set[str] = set()
    for start in decision.starts:
        job = queued.get(start.job_id)
        if job is None:
            problems.append(f"job {start.job_id!r} is not a queued job of the snapshot")
            continue
        if start.job_id in seen:
            problems.append(f"job {start.job_id!r} is started twice")
            continue
        seen.add(start.job_id)
        if len(start.nodes) != job.units:
            problems.append(
                f"job {job.id!r} asks for {job.units} units but {len(start.nodes)} were placed"
            )
        for node_id in start.nodes:
            node = nodes.get(node_id)
            if node is None:
                problems.append(f"job {job.id!r} placed on unknown node {node_id!r}")
                continue
            if node.state is not NodeState.UP:
                problems.append(f"job {job.id!r} placed on {node.state.value} node {node_id!r}")
            used[node_id].update(job.unit_request)

    for node_id, usage in used.items():
        capacity = nodes[node_id].capacity
        for resource, amount in usage.items():
            if amount > capacity.get(resource, 0):
                problems.append(
                    f"node {node_id!r} over capacity on {resource!r}: "
                    f"{amount} > {capacity.get(resource, 0)}"
                )
    return problems
