"""Reservations for more of the oldest blocked jobs than the head: EASY-k inside a CP decision.

With `easy_head`, the head (the oldest job that cannot start now) holds EASY's reservation, and
the model and the heuristic plan place the jobs that start now around it. With a depth k > 1
(`SearchSettings.easy_head_depth`), the next blocked jobs in submit order hold one too, until k
jobs hold one, as in EASY-k (`backfill.plan_backfill`), and the decision's starts are made to
respect them. One pass over the queue in priority order (submit order within equal priority),
on the profile of the running work and the head's reservation on its nodes (`NodeProfile`,
which reads a site's rules):

- a job the decision starts stays started if its rn_i units fit for all of d_i around what the
  pass holds so far (on its own nodes, or on others where those collide); otherwise it waits;
- a job that waits gets, while fewer than k jobs hold one, the earliest s_j at which it fits
  around what the pass holds so far (s_j > 0; a waiting job that would fit now is no blocked
  job, the decision chose not to start it, and holds none).

So no job started now delays a reservation of an older job, whatever the model chose: the model
sees the head's reservation only, and this pass keeps the other k - 1 as EASY-k keeps them.
"""

from __future__ import annotations

from dataclasses import dataclass

from .job_orders import by_priority
from .job_selection import never_fits
from .node_profile import NodeProfile
from .problem import Job, Problem
from .reservation import Reservation
from .stopping import StopCheck, Stopped, every_few, never


@dataclass(frozen=True, slots=True)
class Held:
    """A blocked job's reservation: s_j (relative to t) and the node of each of its units."""

    job: Job
    start: int
    nodes: tuple[int, ...]


def keep_later_reservations(
    problem: Problem,
    placements: dict[int, list[int]],
    head: Reservation,
    depth: int,
    first_fit: bool = False,
    should_stop: StopCheck = never,
) -> tuple[dict[int, list[int]], list[Held]]:
    """The starts of `placements` (job index -> node of each unit) that delay no reservation
    of the `depth` oldest blocked jobs of `problem`, `head` the first of them, and those
    reservations. Raises Stopped when `should_stop()` turns true."""
    profile = NodeProfile(problem)
    profile.take(head.job, head.start, list(head.nodes))
    held = [Held(head.job, head.start, head.nodes)]
    kept: dict[int, list[int]] = {}
    left = len(placements)  # starts of the decision not yet taken
    check = every_few(should_stop)
    for job in by_priority(problem):
        if left == 0 and len(held) >= depth:
            break
        if job.index == head.job.index or never_fits(problem, job):
            continue
        if check():
            raise Stopped("later reservations")
        nodes = placements.get(job.index)
        if nodes is not None:
            left -= 1
            if profile.fits_on(job, 0, nodes):
                profile.take(job, 0, nodes)
                kept[job.index] = nodes
                continue
            if profile.fits_at(job, 0):
                kept[job.index] = profile.place(job, 0, first_fit)
                continue
        if len(held) < depth:
            start = profile.earliest(job, should_stop)
            if start > 0:
                held.append(Held(job, start, tuple(profile.place(job, start, first_fit))))
    return kept, held
