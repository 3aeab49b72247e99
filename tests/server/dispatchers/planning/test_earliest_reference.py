"""NodeProfile.earliest (all the pooled candidates at once, units per node and step, a queue of
two stacks for the least units over a run) against the search it replaced, kept here: one
candidate at a time from `first_room`, each run's free amounts read anew with `free_during`.

Random systems with many steps (running work ending at many times), reservations placed one
after another at their earliest start (some from a later `not_before`), some taken where they
do not fit (overfull nodes: negative amounts), requests of one to three types: every answer,
and the nodes `place` then picks, must be the reference's.
"""

from __future__ import annotations

import random

import pytest

from hpcdispatch.server.dispatchers.planning import node_profile
from hpcdispatch.server.dispatchers.planning.capacity_profile import first_room
from hpcdispatch.server.dispatchers.planning.job_selection import never_fits
from hpcdispatch.server.dispatchers.planning.node_profile import NodeProfile
from hpcdispatch.server.dispatchers.planning.problem import Job
from hpcdispatch.snapshot import NodeState, Snapshot
from tests.instances import T, node, problem_of, running


@pytest.fixture(autouse=True, params=["grid", "changes"])
def planner_reads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test twice: on the grid small profiles are read from, and on the changes alone
    (what large ones read: `node_profile.DENSE_CELLS` 0)."""
    if request.param == "changes":
        monkeypatch.setattr(node_profile, "DENSE_CELLS", 0)


def reference_earliest(profile: NodeProfile, job: Job, not_before: int = 0) -> int:
    """The search `earliest` did before (issue #36)."""
    demand = job.demand()
    times, pooled = profile.times, profile.pooled
    while True:
        start = first_room(times, pooled, demand, job.duration, not_before)
        free = profile.free_during(start, start + job.duration)
        if int(profile.units_fitting(free, job).sum()) >= job.units:
            return start
        later = int(times.searchsorted(start, side="right"))
        if later == len(times):
            raise AssertionError("a job that fits an empty system must fit once all ends")
        not_before = int(times[later])


def random_snapshot(rng: random.Random) -> Snapshot:
    nodes = tuple(
        node(i, cores=rng.randint(1, 8), gpu=rng.randint(0, 2), mem=rng.randint(2, 16),
             state=NodeState.DOWN if rng.random() < 0.1 else NodeState.UP)
        for i in range(rng.randint(2, 24)))
    work = []
    for k, n in enumerate(nodes):
        for part in range(rng.randint(0, 3)):
            cores = rng.randint(1, max(1, n.capacity["core"] // 3))
            work.append(running(f"r{k}-{part}", n.id, cores, rng.randint(1, 400)))
    used: dict[str, int] = {}
    kept = []
    for r in work:  # at most a node's cores
        (unit,) = r.units
        if used.get(unit.node_id, 0) + unit.amounts["core"] <= next(
                n.capacity["core"] for n in nodes if n.id == unit.node_id):
            used[unit.node_id] = used.get(unit.node_id, 0) + unit.amounts["core"]
            kept.append(r)
    return Snapshot(time=T, nodes=nodes, running=tuple(kept), queued=())


@pytest.mark.parametrize("seed", range(60))
def test_earliest_answers_as_the_search_one_candidate_at_a_time(seed: int) -> None:
    rng = random.Random(seed)
    problem = problem_of(random_snapshot(rng))
    profile = NodeProfile(problem)
    for index in range(40):
        amounts = {"core": rng.randint(0, 4), "gpu": rng.choice((0, 0, 1)),
                   "mem": rng.choice((0, 1, 3))}
        req = tuple(amounts[r] for r in problem.resources)
        job = Job(index, f"j{index}", T, rng.randint(1, 6), req, rng.randint(1, 300))
        if never_fits(problem, job):
            continue
        not_before = rng.choice((0, 0, rng.randint(0, 500)))
        expected = reference_earliest(profile, job, not_before)
        assert profile.earliest(job, not_before=not_before) == expected
        if rng.random() < 0.1 and profile.free.shape[0] > 1:  # an overfull node, later on
            victim = rng.randrange(len(problem.node_ids))
            if problem.eligible[victim]:
                profile.take(job, expected, [victim] * job.units)
                continue
        before = profile.checkpoint()
        nodes = profile.place(job, expected)
        # The nodes of a fresh read of the run (no `earliest` just before) are the same.
        profile.restore(before)
        assert profile.place(job, expected) == nodes
