"""The running work's rows (server/domain/occupancy.py `running_rows`): one per job and node
(moved here from the session tests, issue #52)."""

from __future__ import annotations

import random

import pytest

from hpcdispatch.server.domain.occupancy import running_rows
from hpcdispatch.snapshot import RunningJob, UnitAllocation


@pytest.mark.parametrize("seed", range(20))
def test_running_rows_sum_each_jobs_units_per_node(seed: int) -> None:
    """One row per (job, node), in job order then first-unit order, holding the sum of the
    job's units there; jobs of one unit each take the column-by-column path."""
    rng = random.Random(seed)
    resources = ("core", "gpu", "mem")
    position = {f"n{i}": i for i in range(6)}
    single = rng.random() < 0.5
    jobs = [
        RunningJob(f"r{j}", "u", "a", 0, 10, None, tuple(
            UnitAllocation(rng.choice(list(position)),
                           {r: rng.randint(0, 5) for r in rng.sample(resources, 2)})
            for _ in range(1 if single else rng.randint(1, 4))))
        for j in range(rng.randint(0, 12))
    ]
    expected: list[tuple[int, int, list[int]]] = []  # (job, node, amounts)
    for i, job in enumerate(jobs):
        mine: dict[int, list[int]] = {}
        for unit in job.units:
            row = mine.setdefault(position[unit.node_id], [0] * len(resources))
            for r, name in enumerate(resources):
                row[r] += unit.amounts.get(name, 0)
        expected.extend((i, n, amounts) for n, amounts in mine.items())
    nodes, amounts, owner = running_rows(jobs, position, resources)
    assert [(int(o), int(n), list(a)) for o, n, a in zip(
        owner.tolist(), nodes.tolist(), amounts.tolist(), strict=True)] == expected
