"""A list schedule in priority order: the heuristic incumbent of the CP dispatchers.

Each job, highest priority first, gets the earliest start at which the pooled capacity holds it
for d_i. With `exact_now`, a start at t also needs a node-level placement at t (best fit), so the
jobs it starts now form a valid decision by themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpcdispatch.server.dispatchers.problem import Job, Problem, later_start_bounds
from hpcdispatch.server.dispatchers.reservation import Reservation, place_now


@dataclass(slots=True)
class GreedySchedule:
    starts: dict[int, int]  # job index -> start relative to t
    nodes: dict[int, list[int]]  # job index -> unit nodes, for jobs starting at t


def greedy_schedule(
    problem: Problem,
    jobs: list[Job],
    exact_now: bool,
    first_fit: bool = False,
    reservation: Reservation | None = None,
) -> GreedySchedule:
    """With `reservation`, its head's block is in the pooled plan and starts at t respect it."""
    profile = problem.pooled_profile()
    pool = problem.free_now.copy()
    if reservation is not None:
        reservation = reservation.copy()
        start, duration, demand = reservation.block()
        profile.reserve(demand, start, duration)
    schedule = GreedySchedule({}, {})
    later = later_start_bounds(problem, jobs)
    for job in jobs:
        demand = job.demand()
        start = profile.earliest_start(demand, job.duration)
        if start == 0 and exact_now:
            nodes = place_now(pool, reservation, job, first_fit)
            if nodes is None:
                start = profile.earliest_start(demand, job.duration, not_before=later[job.index])
            else:
                schedule.nodes[job.index] = nodes
        profile.reserve(demand, start, job.duration)
        schedule.starts[job.index] = start
    return schedule


def total_slowdown(problem: Problem, jobs: list[Job], starts: dict[int, int]) -> float:
    """Σ (s_i - q_i + d_i) / d_i with s_i = t + relative start."""
    return sum(
        (problem.t + starts[j.index] - j.submit + j.duration) / j.duration for j in jobs
    )
