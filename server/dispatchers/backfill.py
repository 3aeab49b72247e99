"""The one backfill base of EASY-k and conservative: reservations for the first k blocked jobs.

Jobs are taken in a queue order. Each of them, while fewer than k jobs hold a reservation, gets
the earliest start s_i >= t at which its rn_i units fit node by node for all of d_i, around the
predicted ends of the running work and every job placed before it (`NodeProfile`): at s_i = t
it starts now, otherwise it holds that reservation. Once k jobs hold one, a later job starts
now only where it fits for all of d_i without touching any of them (it backfills), else waits.
k = 1 is EASY (the head's reservation only), k unlimited is conservative backfilling (Mu'alem
& Feitelson 2001), k in between is flux-sched's "hybrid" queue policy (reservation-depth).

A job is fitted only into what the reservations before it leave, so starting it never delays
one of them. The profile reads a site's rules (E_i, windows): every reservation and start is on
nodes its job may use, and runs into no window that does not admit it. `held` carries
reservations over from an earlier decision (conservative's guarantee, see `conservative.py`):
they are placed first, then compressed in order of their start (each taken out and put back
at its earliest start, which is never later, as its own slot is free again), and only then do
the other jobs get theirs, in queue order.

Past the deadline, or once the caller is gone, the jobs placed so far are the decision (each
start is valid on its own, and the reservations before it are intact); the rest wait.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..domain.outcome_kinds import SkipReason
from .base import HEURISTIC, Outcome
from .planning.job_selection import never_fits
from .planning.node_profile import NodeProfile
from .planning.pooled_tests import earlier_all
from .planning.problem import Job, Problem
from .planning.stopping import StopCheck, Stopped, every_few, never, stop_if

UNLIMITED = 0  # reservation depth: every queued job gets a reservation


@dataclass(slots=True)
class BackfillPlan:
    """Reservations in the order they were made: job index -> (s_i - t, node of each unit).

    A reservation at 0 is a start now."""

    reservations: dict[int, tuple[int, list[int]]] = field(default_factory=dict)
    waiting: list[int] = field(default_factory=list)  # past the depth, not fitting now
    never: list[int] = field(default_factory=list)  # job indices no up nodes can ever hold
    # Jobs not reached before the stop (their reservations do not exist), in queue order.
    unplanned: list[int] = field(default_factory=list)
    # Held reservations that no longer fit (a running job outlived its prediction, a node went
    # down, d_i grew): their jobs were reserved anew, possibly later.
    displaced: list[int] = field(default_factory=list)

    def starts(self) -> dict[int, list[int]]:
        return {i: nodes for i, (s, nodes) in self.reservations.items() if s == 0}

    def stopped_before(self, queue: list[Job]) -> None:
        """The stop came: the jobs of `queue` neither reserved nor waiting are unplanned."""
        done = set(self.reservations) | set(self.waiting)
        self.unplanned = [j.index for j in queue if j.index not in done]


def plan_backfill(
    problem: Problem,
    order: list[Job],
    depth: int = UNLIMITED,
    first_fit: bool = False,
    should_stop: StopCheck = never,
    held: Mapping[int, tuple[int, list[int]]] | None = None,
    repack: bool = False,
) -> BackfillPlan:
    """The plan for `order` (the queue in its order) with reservation depth `depth` (UNLIMITED
    = 0: every job). `held`: job index -> (start relative to t, possibly <= 0, nodes) of
    reservations kept from earlier decisions (only with UNLIMITED). `repack`: a job that
    waits although the pooled view would start it now gets the nodes of later reservations
    moved (`_repack`). Stops early (the rest unplanned) when `should_stop()` turns true."""
    return plan_with_profile(problem, order, depth, first_fit, should_stop, held, repack)[0]


def plan_with_profile(
    problem: Problem,
    order: list[Job],
    depth: int = UNLIMITED,
    first_fit: bool = False,
    should_stop: StopCheck = never,
    held: Mapping[int, tuple[int, list[int]]] | None = None,
    repack: bool = False,
    profile: NodeProfile | None = None,
) -> tuple[BackfillPlan, NodeProfile | None]:
    """`plan_backfill`, and the node profile it leaves (every reservation taken; None where no
    job could ever fit or the stop came first). `profile`: `NodeProfile(problem)`, if the
    caller made it already."""
    plan = BackfillPlan()
    queue: list[Job] = []
    for job in order:
        if never_fits(problem, job):
            plan.never.append(job.index)
        else:
            queue.append(job)
    if not queue:
        return plan, None
    if should_stop():
        plan.stopped_before(queue)
        return plan, None
    if profile is None:
        profile = NodeProfile(problem)
    rest = queue
    try:
        if held:
            rest = _compress(profile, queue, held, first_fit, should_stop, plan)
        reserve_in_order(profile, rest, depth, first_fit, should_stop, plan)
        if repack:
            _repack(profile, plan, {j.index: j for j in queue}, first_fit, should_stop)
    except Stopped:
        plan.stopped_before(queue)
    return plan, profile


def reserve_in_order(
    profile: NodeProfile,
    jobs: list[Job],
    depth: int,
    first_fit: bool,
    should_stop: StopCheck,
    plan: BackfillPlan,
    now: int = 0,
    reserved: int = 0,
) -> None:
    """Reserve for `jobs` in their order, `reserved` jobs holding a reservation already: the
    earliest start while fewer than `depth` do, otherwise a start now or a wait. `now`: t in
    the profile's times (> 0 for a profile kept from an earlier decision); the plan's starts
    are relative to t."""
    for job in jobs:
        if depth == UNLIMITED or reserved < depth:
            start = profile.earliest(job, should_stop, now)
            plan.reservations[job.index] = (start - now, profile.place(job, start, first_fit))
            reserved += start > now
        else:
            stop_if(should_stop, "backfill")
            if profile.fits_at(job, now):  # on the nodes the site's rules allow it
                plan.reservations[job.index] = (0, profile.place(job, now, first_fit))
            else:
                plan.waiting.append(job.index)


def _compress(
    profile: NodeProfile,
    queue: list[Job],
    held: Mapping[int, tuple[int, list[int]]],
    first_fit: bool,
    should_stop: StopCheck,
    plan: BackfillPlan,
) -> list[Job]:
    """Place the held reservations that still fit, compress them in order of their start, and
    return the jobs still to be reserved: the displaced ones (by their old start), then the
    others in queue order. A reservation that the pooled view would not start earlier either
    stays where it is without being given back and searched for again."""
    kept: list[tuple[int, Job, list[int]]] = []
    displaced: list[tuple[int, int, Job]] = []
    rank = {job.index: r for r, job in enumerate(queue)}
    by_start = sorted((j for j in queue if j.index in held),
                      key=lambda j: (held[j.index][0], rank[j.index]))
    # Due (or overdue) reservations would start now.
    placed = [(max(held[j.index][0], 0), j, held[j.index][1]) for j in by_start]
    # Every held start and end a step boundary at once, then only the kept ones stay one.
    profile.add_boundaries(b for start, job, _ in placed for b in (start, start + job.duration))
    if profile.take_all(placed):  # the usual case: every one still fits
        kept = placed
    else:
        check = every_few(should_stop)
        for start, job, nodes in placed:
            stop_if(check, "conservative compression")
            if profile.fits_on(job, start, nodes):
                profile.take(job, start, nodes)
                kept.append((start, job, nodes))
            else:
                displaced.append((start, rank[job.index], job))
                plan.displaced.append(job.index)
    profile.keep_boundaries(b for start, job, _ in kept for b in (start, start + job.duration))
    # The pooled test of every reservation still to compress, read off the profile as it was
    # when last asked: valid until a reservation moves (giving one back and taking it again
    # changes no amount).
    could: list[bool] = []
    for k, (start, job, nodes) in enumerate(kept):
        stop_if(should_stop, "conservative compression")
        if not could:
            could = earlier_all(profile, [(s, j) for s, j, _ in kept[k:]])
        if not could.pop(0):  # not even in the pooled view
            plan.reservations[job.index] = (start, nodes)
            continue
        profile.give_back(job, start, nodes)
        earlier = profile.earliest(job, should_stop)
        if earlier >= start:  # no gain (never later: its own slot is free): keep its nodes
            profile.take(job, start, nodes)
            plan.reservations[job.index] = (start, nodes)
        else:
            plan.reservations[job.index] = (earlier, profile.place(job, earlier, first_fit))
            could = []
    return [job for _, _, job in displaced] + [j for j in queue if j.index not in held]


MAX_REPACK_CELLS = 5_000_000  # steps x nodes x types of a profile worth a repacking attempt


def _repack(
    profile: NodeProfile,
    plan: BackfillPlan,
    jobs: Mapping[int, Job],
    first_fit: bool,
    should_stop: StopCheck,
) -> None:
    """Start now the jobs that wait only because of where later reservations sit.

    Reservations hold nodes, but until it starts a job needs only some nodes at its time. A job
    i whose units fit now in the pooled view for all of d_i (every other reservation in place)
    may still not fit node by node, because the reservations took nodes that i needs while
    others, as good for them, stay free. For each such job, in order of its reservation: the
    future reservations are taken out, i is placed now, and the others are put back at their
    own start times, in that order, on whatever nodes fit. If all fit, i starts now and no
    other reservation moved in time; otherwise nothing changes. With nodes of one unit each
    (KTH-SP2's 100 single-processor nodes), putting intervals back in order of their start
    always succeeds when the pooled view has room, so a job then waits only when it has to.
    """
    if profile.cells > MAX_REPACK_CELLS:
        return
    # Each attempt moves every future reservation: asked inside its loops too, so that a stop
    # lands within a few reservations (a stopped attempt changes nothing in the plan).
    check = every_few(should_stop)
    future = sorted((s, i) for i, (s, _) in plan.reservations.items() if s > 0)
    # The pooled test of every reservation still ahead, read off the profile as it was when
    # last asked: valid until one starts now (a failed attempt restores every amount).
    now: dict[int, bool] = {}
    moved: list[tuple[int, int]] | None = None
    started = _started_only(profile, plan, jobs)
    for pos, (_, i) in enumerate(future):
        stop_if(should_stop, "conservative repacking")
        job = jobs[i]
        if plan.reservations[i][0] == 0:
            continue
        if i not in now:
            ahead = future[pos:]
            now = dict(zip((k for _, k in ahead),
                           earlier_all(profile, [(s, jobs[k]) for s, k in ahead], True),
                           strict=True))
        if not now[i]:  # not even in the pooled view
            continue
        if moved is None:  # the future reservations, as they are until an attempt succeeds
            moved = sorted((s, k) for k, (s, _) in plan.reservations.items() if s > 0)
        # Whether i fits now with every future reservation given back (what the running work
        # and the starts now leave): most attempts end there, without copying a profile.
        if not started.fits_at(job, 0):
            continue
        stop_if(check, "conservative repacking")
        placed = _attempt(started, profile, plan, jobs, i, moved, first_fit, should_stop)
        if placed is not None:
            plan.reservations.update(placed)
            started.take(job, 0, placed[i][1])
            now, moved = {}, None  # i starts now: the pooled view changed


def _started_only(profile: NodeProfile, plan: BackfillPlan, jobs: Mapping[int, Job]
                  ) -> NodeProfile:
    """A profile of the running work and the plan's starts now only: `profile` with every
    future reservation given back, the same free amounts at every time."""
    started = NodeProfile(profile.problem)
    now = [(0, jobs[k], nodes) for k, (s, nodes) in plan.reservations.items() if s == 0]
    started.add_boundaries(b for _, job, _ in now for b in (0, job.duration))
    if not started.take_all(now):  # some node overfull: one by one, as they were taken
        for _, job, nodes in now:
            started.take(job, 0, nodes)
    return started


def _attempt(
    started: NodeProfile, profile: NodeProfile, plan: BackfillPlan, jobs: Mapping[int, Job],
    i: int, moved: list[tuple[int, int]], first_fit: bool, should_stop: StopCheck,
) -> dict[int, tuple[int, list[int]]] | None:
    """One repacking attempt: the future reservations `moved` taken out (a copy of `started`,
    the running work and the starts now only), i placed now, the others put back at their own
    starts in order. The new reservations if all fit, `profile` then holding them; else None
    with `profile` as it was."""
    trial = started.copy()
    if not trial.fits_at(jobs[i], 0):
        return None
    placed = {i: (0, trial.place(jobs[i], 0, first_fit))}
    for s, k in moved:
        stop_if(should_stop, "conservative repacking")
        if k == i:
            continue
        if not trial.fits_at(jobs[k], s):
            return None
        placed[k] = (s, trial.place(jobs[k], s, first_fit))
    profile.adopt(trial)
    return placed


def outcome_of(problem: Problem, plan: BackfillPlan, promised: bool = False) -> Outcome:
    """The decision of `plan`: its starts now; every other queued job waits, with its reason,
    and its reservation, if it holds one, as its expected start (`promised`: the reservations
    are kept between decisions and only move earlier, as conservative's)."""
    outcome = Outcome(placements={}, status=HEURISTIC)
    outcome.skipped.extend((i, SkipReason.NEVER_FITS) for i in plan.never)
    waiting = [i for i, (start, _) in plan.reservations.items() if start > 0] + plan.waiting
    for i, (start, nodes) in plan.reservations.items():
        if start == 0:
            outcome.placements[i] = nodes
            outcome.considered.append(i)
        else:
            outcome.expected_starts[i] = (start, promised)
    for i in waiting:
        job = problem.jobs[i]
        fits_now = problem.free_now.units_fit(job.req, job.units) >= job.units
        # Fits what is free now, but only by taking what a reservation before it needs.
        reason = SkipReason.BLOCKED if fits_now else SkipReason.CANNOT_FIT_NOW
        outcome.skipped.append((i, reason))
    outcome.skipped.extend((i, SkipReason.BLOCKED) for i in plan.unplanned)
    return outcome
