"""EASY's head discipline for a CP decision: the oldest jobs start now, in EASY's queue order
(priority, then submit order), while they fit, each on the nodes a site's rules allow it; the
first that does not fit is the head, and the rest of the decision is made on the problem they
leave.

EASY keeps two promises: the queue is served in its order (a job never waits for a later one
to be served first, except where the later one fits without delaying it), and the head's start
τ never moves later for a job started now. The CP dispatchers keep them with their
`SearchSettings.easy_head` profile knob: `oldest_that_fit` starts the prefix of the queue
exactly as EASY does (priority, then q_i, then queue position, each placed node by node on what
is free at t, on its start-now nodes: one place for that step, with or without rules),
`with_started` turns those starts into running work of a smaller problem, and the head of that
problem (its first job in queue order, which cannot start now) holds EASY's reservation while
the model chooses, among the jobs that fit around it, what starts now.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from ...domain.occupancy import MAX_MODEL_DURATION, RunningTable
from .job_orders import by_priority
from .job_selection import never_fits
from .problem import Problem
from .stopping import StopCheck, Stopped, every_few, never


def oldest_that_fit(
    problem: Problem, first_fit: bool, should_stop: StopCheck = never
) -> dict[int, list[int]]:
    """The queue's prefix that fits now: job index -> node of each unit, in EASY's queue order
    (`by_priority`: higher priority first, then q_i), up to the first job that does not fit
    (jobs that never fit on the up nodes are passed over, as EASY passes them over). With a
    site's rules (`problem.eligibility`), each job is placed on its start-now nodes
    (`Eligibility.now`); one that fits what is free but not where its rules allow is the head,
    as EASY's (`dispatchers/easy.py`), so it holds the reservation, read on its own nodes.
    Raises Stopped when `should_stop()` turns true meanwhile."""
    rules = problem.eligibility
    free = problem.free_now.copy()
    placements: dict[int, list[int]] = {}
    check = every_few(should_stop)
    for job in by_priority(problem):
        if check():
            raise Stopped("oldest jobs that fit")
        if never_fits(problem, job):
            continue  # never fits: not a head, skipped by the window as such
        mask = rules.now(job.index) if rules is not None else None
        nodes = free.place(job.req, job.units, first_fit, mask)
        if nodes is None:
            break  # the head, as EASY's (dispatchers/easy.py): its reservation reads its rules
        placements[job.index] = nodes
    return placements


def with_started(problem: Problem, placements: dict[int, list[int]]) -> Problem:
    """`problem` once the jobs of `placements` have started at t: they leave the queue, their
    units leave what is free now, and they run from t for d_i (at most MAX_MODEL_DURATION)."""
    if not placements:
        return problem
    free = problem.free_now.copy()
    by_index = problem.job_by_index()
    nodes: list[int] = []
    amounts: list[tuple[int, ...]] = []
    ends: list[int] = []
    limits: list[int] = []
    for index, units in placements.items():
        job = by_index[index]
        free.take_all(units, job.req)
        for n, count in Counter(units).items():  # one row per (job, node), as running work has
            nodes.append(n)
            amounts.append(tuple(count * a for a in job.req))
            ends.append(min(job.duration, MAX_MODEL_DURATION))
            limits.append(min(job.at_most, MAX_MODEL_DURATION))
    run = problem.running
    width = len(problem.resources)
    added_nodes = np.asarray(nodes, dtype=np.int64)
    running = RunningTable(
        nodes=np.concatenate([run.nodes, added_nodes]),
        amounts=np.concatenate(
            [run.amounts.reshape(-1, width), np.asarray(amounts, dtype=np.int64)]
        ),
        ends=np.concatenate([run.ends, np.asarray(ends, dtype=np.int64)]),
        up=np.concatenate([run.up, np.ones(len(nodes), dtype=np.bool_)]),
        limits=np.concatenate([run.limit_ends, np.asarray(limits, dtype=np.int64)]),
    )
    return Problem(
        t=problem.t, resources=problem.resources, node_ids=problem.node_ids,
        capacity=problem.capacity, eligible=problem.eligible, free_now=free, running=running,
        jobs=[j for j in problem.jobs if j.index not in placements],
        up_capacity=problem.up_capacity, eligibility=problem.eligibility,
    )

