"""EASY-k's plan kept between decisions at which only jobs were submitted.

A decision that started nothing leaves every job it planned holding a reservation after t, or
waiting past the depth. At the next decision, if nothing ended, started or changed on the
nodes since (the same free amounts, up nodes and running work releasing at the same absolute
times, all after the new t) and the queue begins with the same jobs (same d_i, request and
units), the step function of free amounts from the new t on is the old one from that time on:
no release fell in between, so the old first step lasts until after it. Each of those jobs'
earliest start is then where it was (the earliest at or after the old t, and it is after the
new t), its nodes the same (the same free amounts over its run), so the reservations stand as
they are — while every one of them is still after the new t (one due now would start, and
count no more towards the depth). What moves with t is only what is decided at t: the jobs
past the depth are tested again over their run from the new t, and the jobs new to the queue
are reserved in order after the others, both on the kept profile from the new t on
(`backfill.reserve_in_order`). Anything else, and the plan is made anew.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .backfill import BackfillPlan, plan_with_profile, reserve_in_order
from .planning.free_pool import Vec
from .planning.job_selection import never_fits
from .planning.node_profile import NodeProfile
from .planning.problem import Job, Problem
from .planning.stopping import StopCheck, Stopped

JobKey = tuple[str, int, Vec, int, int]  # id, q_i, request, rn_i, d_i


def job_key(job: Job) -> JobKey:
    return job.id, job.submit, job.req, job.units, job.duration


@dataclass(slots=True)
class _Kept:
    """A plan that started nothing, with what it was made from."""

    base: int  # t of the decision the profile's times count from
    released_at: npt.NDArray[np.int64]  # absolute release times of the running work
    release_nodes: npt.NDArray[np.int64]
    release_amounts: npt.NDArray[np.int64]
    free: list[Vec]
    eligible: list[bool]
    scale: Vec
    settings: tuple[int, bool]  # depth, first fit
    jobs: list[JobKey]  # the jobs planned (never fitting left out), in queue order
    reserved: list[tuple[int, list[int]]]  # the first len(reserved): start (base's), nodes
    profile: NodeProfile  # every reservation taken


class KeptPlan:
    """The last plan of EASY-k that started nothing, one per thread (the profile is changed
    in place when the plan is carried on)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def plan(self, problem: Problem, order: list[Job], depth: int, first_fit: bool,
             should_stop: StopCheck) -> BackfillPlan:
        """`plan_backfill(problem, order, depth, first_fit, should_stop)`."""
        kept: _Kept | None = getattr(self._local, "kept", None)
        self._local.kept = None
        queue = [job for job in order if not never_fits(problem, job)]
        if kept is not None and _same_inputs(kept, problem, queue, depth, first_fit) \
                and not should_stop():
            plan = _carry_on(kept, problem, order, queue, should_stop)
        else:
            plan, profile = plan_with_profile(problem, order, depth, first_fit, should_stop)
            if profile is None:
                return plan
            events = problem.release_events()
            kept = _Kept(problem.t, events.ends + problem.t, events.nodes, events.amounts,
                         list(problem.free_now.free), list(problem.free_now.eligible),
                         problem.free_now.scale, (depth, first_fit), [], [], profile)
        if plan.unplanned or any(s == 0 for s, _ in plan.reservations.values()):
            return plan  # something starts (or was not reached): the next plan is made anew
        kept.jobs = [job_key(job) for job in queue]
        kept.reserved = [(s + problem.t - kept.base, nodes)
                         for s, nodes in plan.reservations.values()]
        self._local.kept = kept
        return plan


def _same_inputs(kept: _Kept, problem: Problem, queue: list[Job], depth: int,
                 first_fit: bool) -> bool:
    """Whether the kept plan stands at this decision (see the module's docstring)."""
    t = problem.t
    if t < kept.base or kept.settings != (depth, first_fit) or len(queue) < len(kept.jobs):
        return False
    if any(start <= t - kept.base for start, _ in kept.reserved):
        return False  # due now: it would start
    events = problem.release_events()
    free_now = problem.free_now
    return (np.array_equal(kept.released_at, events.ends + t)
            and np.array_equal(kept.release_nodes, events.nodes)
            and np.array_equal(kept.release_amounts, events.amounts)
            and kept.scale == free_now.scale and kept.free == free_now.free
            and kept.eligible == free_now.eligible
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
        done = set(plan.reservations) | set(plan.waiting)
        plan.unplanned = [j.index for j in queue if j.index not in done]
    return plan
