"""Random but reproducible dispatching instances of a given system and load.

Used by tests, benchmarks and the embedded example: a system about `busy` loaded with running
jobs, and a queue of jobs whose units ask for the resource types of the system's nodes.
"""

from __future__ import annotations

import random

from hpcdispatch.snapshot import QueuedJob, RunningJob, Snapshot, UnitAllocation
from hpcdispatch.systems import System


def synthetic_snapshot(
    system: System, queued: int = 100, busy: float = 0.7, seed: int = 0, time: int = 100_000
) -> Snapshot:
    rng = random.Random(seed)
    nodes = system.nodes()
    free = {n.id: dict(n.capacity) for n in nodes}
    total_cores = sum(n.capacity.get("core", 0) for n in nodes)
    running: list[RunningJob] = []
    used_cores = 0
    order = list(nodes)
    rng.shuffle(order)
    # Fill nodes with running jobs until about `busy` of the cores are in use.
    for job_id, node in enumerate(order, start=1):
        if used_cores >= busy * total_cores:
            break
        cap = node.capacity
        share = rng.choice([0.25, 0.5, 0.75, 1.0])
        amounts = {r: max(1, int(v * share)) for r, v in cap.items()}
        requested = rng.choice([600, 3600, 4 * 3600, 24 * 3600])
        start = time - rng.randint(0, requested - 1)
        running.append(
            RunningJob(
                id=f"r{job_id}", user=f"u{rng.randint(1, 20)}", name=f"app{rng.randint(1, 8)}",
                start_time=start, requested_time=requested, expected_duration=None,
                units=(UnitAllocation(node.id, amounts),),
            )
        )
        for r, v in amounts.items():
            free[node.id][r] -= v
        used_cores += amounts.get("core", 0)
    types = [dict(g.capacity) for g in system.groups]
    jobs: list[QueuedJob] = []
    for i in range(queued):
        template = rng.choice(types)
        units = rng.choice([1, 1, 1, 2, 4, 8])
        per_unit = {"core": max(1, template.get("core", 1) // rng.choice([1, 2, 4, 8]))}
        if "mem" in template:
            per_unit["mem"] = max(1, template["mem"] // rng.choice([2, 4, 8, 16]))
        for accel in ("gpu", "mic"):
            if accel in template and rng.random() < 0.3:
                per_unit[accel] = rng.randint(1, template[accel])
        requested = rng.choice([300, 1800, 3600, 4 * 3600, 12 * 3600])
        jobs.append(
            QueuedJob(
                id=f"q{i}", user=f"u{rng.randint(1, 20)}", name=f"app{rng.randint(1, 8)}",
                queue="batch", submit_time=time - rng.randint(0, 7200), units=units,
                unit_request=per_unit, requested_time=requested,
                actual_duration=max(1, int(requested * rng.uniform(0.05, 1.0))),
            )
        )
    return Snapshot(time=time, nodes=nodes, running=tuple(running), queued=tuple(jobs))
