"""EASY-k's plan kept between decisions at which only jobs were submitted.

A decision leaves every job it planned and did not start holding a reservation after t, or
waiting past the depth. At the next decision, if nothing ended or changed on the nodes since
but the jobs it started (the step function of free amounts from the new t on, the running work
only, is the old one with the started jobs' blocks, from that time on) and the queue begins
with the jobs it did not start (same d_i, request and units), each of those jobs' earliest
start is where it was (the earliest at or after the old t, and it is after the new t), its
nodes the same (the same free amounts over its run), so the reservations stand as they are —
while every one of them is still after the new t (one due now would start, and count no more
towards the depth). What moves with t is only what is decided at t: the jobs past the depth
are tested again over their run from the new t, and the jobs new to the queue are reserved in
order after the others, both on the kept profile from the new t on
(`backfill.reserve_in_order`). Anything else, and the plan is made anew.

Where the last decision started nothing, its free amounts and the running work's absolute
release times equal to this one's say the step functions are the same; otherwise they are
compared (`same_steps`). A snapshot with a site's rules (partitions, features, windows) is
planned anew every time.
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..domain.free_pool import Vec
from .backfill import BackfillPlan, plan_with_profile, reserve_in_order
from .planning.job_selection import never_fits
from .planning.node_profile import NodeProfile
from .planning.problem import Job, Problem
from .planning.stopping import StopCheck, Stopped

JobKey = tuple[str, int, Vec, int, int]  # id, q_i, request, rn_i, d_i
Inputs = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], list[Vec]]


def job_key(job: Job) -> JobKey:
    return job.id, job.submit, job.req, job.units, job.duration


def inputs_of(problem: Problem) -> Inputs:
    """Absolute release times, their nodes and amounts, and the free amounts now."""
    events = problem.release_events()
    return (events.ends + problem.t, events.nodes, events.amounts,
            list(problem.free_now.free))


def same_inputs(a: Inputs, b: Inputs) -> bool:
    return (np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
            and np.array_equal(a[2], b[2]) and a[3] == b[3])


def same_steps(fresh: NodeProfile, kept: NodeProfile, now: int) -> bool:
    """Whether `fresh`'s free amounts are `kept`'s from `now` on (at every time)."""
    times = kept.times
    first = int(times.searchsorted(now, side="right")) - 1
    shifted = times[first:] - now
    shifted[0] = 0
    union = np.union1d(shifted, fresh.times)
    return np.array_equal(kept.free[first:][shifted.searchsorted(union, side="right") - 1],
                          fresh.free[fresh.times.searchsorted(union, side="right") - 1])


@dataclass(slots=True)
class _Kept:
    """A plan, with what it was made from."""

    base: int  # t of the decision the profiles' times count from
    inputs: Inputs  # of the last decision
    started: bool  # whether the last decision started jobs (then `inputs` changed)
    eligible: list[bool]
    scale: Vec
    settings: tuple[int, bool]  # depth, first fit
    jobs: list[JobKey]  # the jobs planned and not started (never fitting left out), in order
    reserved: list[tuple[int, list[int]]]  # the first len(reserved): start (base's), nodes
    profile: NodeProfile  # every reservation and start taken
    running: NodeProfile  # the running work and the jobs started since base, only


class KeptPlan:
    """The last plan of EASY-k, one per thread (the profiles are changed in place when the
    plan is carried on)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def plan(self, problem: Problem, order: list[Job], depth: int, first_fit: bool,
             should_stop: StopCheck) -> BackfillPlan:
        """`plan_backfill(problem, order, depth, first_fit, should_stop)`."""
        kept: _Kept | None = getattr(self._local, "kept", None)
        self._local.kept = None
        if problem.eligibility is not None:
            # A site's rules are read per job index and relative to t, by the problem's own
            # profile: a plan is made anew (and kept for none) whenever the snapshot has any.
            return plan_with_profile(problem, order, depth, first_fit, should_stop)[0]
        queue = [job for job in order if not never_fits(problem, job)]
        fresh: NodeProfile | None = None
        if kept is not None and _may_stand(kept, problem, queue, depth, first_fit):
            if not kept.started:
                stands = same_inputs(kept.inputs, inputs_of(problem))
            else:
                fresh = NodeProfile(problem) if queue else None
                stands = fresh is not None and same_steps(fresh, kept.running,
                                                          problem.t - kept.base)
            if stands and not should_stop():
                plan = _carry_on(kept, problem, order, queue, should_stop)
                return self._keep(kept, problem, queue, plan)
        if queue and fresh is None:
            fresh = NodeProfile(problem)
        running = None
        if fresh is not None:
            running = copy.copy(fresh)
            running.restore(fresh.checkpoint())
        plan, profile = plan_with_profile(problem, order, depth, first_fit, should_stop,
                                          profile=fresh)
        if profile is None or running is None:
            return plan
        kept = _Kept(problem.t, inputs_of(problem), False, list(problem.free_now.eligible),
                     problem.free_now.scale, (depth, first_fit), [], [], profile, running)
        return self._keep(kept, problem, queue, plan)

    def _keep(self, kept: _Kept, problem: Problem, queue: list[Job],
              plan: BackfillPlan) -> BackfillPlan:
        """Keep `kept` for the next decision, made up to `plan` (unless it was stopped)."""
        if plan.unplanned:
            return plan  # not every job was reached: the next plan is made anew
        now = problem.t - kept.base
        kept.inputs = inputs_of(problem)
        kept.started = False
        for job in queue:
            start, nodes = plan.reservations.get(job.index, (None, []))
            if start == 0:
                kept.running.take(job, now, nodes)
                kept.started = True
        kept.jobs = [job_key(job) for job in queue
                     if plan.reservations.get(job.index, (None,))[0] != 0]
        kept.reserved = [(s + now, nodes) for s, nodes in plan.reservations.values() if s]
        self._local.kept = kept
        return plan


def _may_stand(kept: _Kept, problem: Problem, queue: list[Job], depth: int,
               first_fit: bool) -> bool:
    """Whether the kept plan may stand at this decision, but for the free amounts over time."""
    now = problem.t - kept.base
    if now < 0 or kept.settings != (depth, first_fit) or len(queue) < len(kept.jobs):
        return False
    if any(start <= now for start, _ in kept.reserved):
        return False  # due now: it would start
    return (kept.scale == problem.free_now.scale and kept.eligible == problem.free_now.eligible
            and all(job_key(job) == key for job, key in zip(queue, kept.jobs, strict=False)))


def _carry_on(kept: _Kept, problem: Problem, order: list[Job], queue: list[Job],
              should_stop: StopCheck) -> BackfillPlan:
    """The plan from the kept one: its reservations as they are, the rest decided at t."""
    plan = BackfillPlan()
    planned = {job.index for job in queue}
    plan.never = [job.index for job in order if job.index not in planned]
    now = problem.t - kept.base
    for job, (start, nodes) in zip(queue, kept.reserved, strict=False):
        plan.reservations[job.index] = (start - now, nodes)
    depth, first_fit = kept.settings
    rest = queue[len(kept.reserved):]
    try:
        reserve_in_order(kept.profile, rest, depth, first_fit, should_stop, plan, now,
                         len(kept.reserved))
    except Stopped:
        plan.stopped_before(queue)
    return plan
