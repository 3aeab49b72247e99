"""Promises: the start s_i a waiting job was told, kept from one decision to the next and only
ever moved earlier while the durations it was planned with hold. The promise book plans them on
the problem at its limits (`problem.at_limits`: running work to its requested time, each job
for its requested time), so no prediction can make one late: only a job running past its limit
or a node going down can (`PromisePlan.moved`, with `PromisePlan.reasons`).

A promise is kept as its start (relative to t here) and the nodes its units are planned on then:
the nodes are the plan's, not part of the promise, and keep the promises' feasibility checkable
from one decision to the next. At each decision (`keep_promises`), on the profile of the running
work (`NodeProfile`):

1. the held promises are placed oldest job first: on their own nodes if they still fit there,
   else at the same s_i on other nodes, else — a running job outlived its expected end, a node
   went down, d_i grew — at the earliest start that fits after the older ones, so that a
   promise moves by the least possible given the older ones (the oldest, EASY's head, is kept
   first, whatever younger promises start before it), and the move is reported
   (`PromisePlan.moved`); a promise already due (s_i <= t) is placed at t;
2. they are compressed in the papers' priority order: each is taken out and put back at its
   earliest start, which is never later (its own room is free again, and every other promise is
   in place), so a promise only moves earlier, and the room a job that ended early freed goes
   to the highest current slowdown first;
3. the other waiting jobs, in submit order, get the earliest start around all of them when they
   qualify (`qualifies`: e.g. they have waited long enough) — and, whatever that says, the
   oldest ones until one does not start now, as EASY treats its head: the oldest jobs start in
   submit order while they fit, and the first that does not holds a promise.

A promise at 0 is due: its job starts now. No other job is placed here: what starts now beside
the due ones is chosen around the profile this leaves (every promise held in it).
"""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ...domain.caller_scope import CallerScope
from ...domain.free_pool import choose_from_array
from ...domain.outcome_kinds import PromiseMove
from .caller_scope import BookKey, book_key
from .eligibility import Window
from .node_profile import NodeProfile
from .problem import Job, Problem, slowdown_rank
from .stopping import StopCheck, Stopped, never, stop_if


@dataclass(slots=True)
class PromisePlan:
    """Every promise after a decision at t: job index -> (s_i - t, node of each unit)."""

    profile: NodeProfile  # the running work and every promise below, taken
    starts: dict[int, tuple[int, list[int]]] = field(default_factory=dict)
    # Held promises that had to move later (job index -> seconds later than promised), and
    # why (`PromiseMove`).
    moved: dict[int, int] = field(default_factory=dict)
    reasons: dict[int, PromiseMove] = field(default_factory=dict)

    def due(self) -> dict[int, list[int]]:
        """The jobs whose promise is now: they start now, on these nodes."""
        return {i: nodes for i, (s, nodes) in self.starts.items() if s == 0}


@dataclass(frozen=True, slots=True)
class Guard:
    """The oldest promise (EASY's head), held against predictions that fail: a job placed
    before it (now, or by a promise) may not be on its nodes past its start if it ran to its
    requested time, the limit at which the workload manager kills it. Predicted durations pack
    the rest; a younger job that outlives its prediction then cannot push the oldest promise
    back (under last-two, such backfills kept a 94-node KTH-SP2 job waiting 229 h against
    EASY's longest, 98 h)."""

    job: int  # the head's index
    start: int
    nodes: npt.NDArray[np.bool_]  # the head's nodes

    def needs_care(self, job: Job, start: int) -> bool:
        """Whether job i placed at `start` for d_i could still be on the head's nodes at its
        start: never where d_i is already its requested time (a placement on a problem at the
        limits, `problem.at_limits`, is checked for all of it; the guard, which keeps every
        other job off the head's nodes, would there only keep nodes idle)."""
        return (job.index != self.job and job.duration < job.at_most
                and start < self.start < start + job.at_most)


def guard_of(plan: PromisePlan) -> Guard | None:
    """The oldest job's promise still ahead, if any holds one."""
    jobs = plan.profile.problem.jobs
    ahead = [i for i, (s, _) in plan.starts.items() if s > 0]
    if not ahead:
        return None
    head = min(ahead, key=lambda i: (jobs[i].submit, i))
    start, nodes = plan.starts[head]
    mask = np.zeros(len(plan.profile.problem.node_ids), dtype=bool)
    mask[nodes] = True
    return Guard(head, start, mask)


def _free_for(profile: NodeProfile, job: Job, start: int,
              guard: Guard | None) -> npt.NDArray[np.int64] | None:
    """What job i may use over [start, start + d_i): None where no guard is in the way, else
    the free amounts without the guard's nodes."""
    if guard is None or not guard.needs_care(job, start):
        return None
    free = profile.free_for(job, start)
    free[guard.nodes] = 0
    return free


def fits_guarded(profile: NodeProfile, job: Job, start: int, guard: Guard | None) -> bool:
    """Whether job i fits at `start` for all of d_i, and off the guard's nodes where it must."""
    free = _free_for(profile, job, start, guard)
    if free is None:
        return profile.fits_at(job, start)
    return int(profile.units_fitting(free, job).sum()) >= job.units


def earliest_guarded(profile: NodeProfile, job: Job, guard: Guard | None,
                     should_stop: StopCheck = never) -> int:
    """The earliest start at which job i fits, or where that would need the guard's nodes,
    the earliest from the guard's start on (from where its nodes are free to use)."""
    start = profile.earliest(job, should_stop)
    if guard is None or fits_guarded(profile, job, start, guard):
        return start
    return profile.earliest(job, should_stop, not_before=guard.start)


def place_guarded(profile: NodeProfile, job: Job, start: int, guard: Guard | None,
                  first_fit: bool) -> list[int]:
    """`place_promise`, off the guard's nodes where it must (best fit on the others)."""
    free = _free_for(profile, job, start, guard)
    if free is None:
        return place_promise(profile, job, start, first_fit)
    nodes = choose_from_array(free, np.asarray(profile.problem.eligible, dtype=bool),
                              profile.problem.free_now.scale, job.req, job.units, first_fit)
    if nodes is None:
        raise AssertionError("place_guarded called where the job does not fit")
    profile.take(job, start, nodes)
    return nodes


def place_promise(profile: NodeProfile, job: Job, start: int, first_fit: bool) -> list[int]:
    """Nodes for job i's units from `start` (taken in `profile`). Now, by the pool's rule. Later,
    as EASY places its head (`reservation.head_nodes`): first the nodes that could hold none of
    its units before `start` (busy until then anyway), then those that could hold the fewest,
    best fit at `start` within each; so a promise takes as little as it can of the room jobs
    may use before it (a promise on nodes free now would keep them idle)."""
    if start == 0:
        return profile.place(job, 0, first_fit)
    during = profile.free_for(job, start)  # off the nodes a site's rules keep it from
    fit = profile.units_fitting(during, job)
    before = profile.units_fitting(profile.free_during(0, start), job)
    order = _promise_order(fit, before, during.sum(axis=1), job.units)
    units = fit[order]
    enough = int(np.cumsum(units).searchsorted(job.units))  # the first nodes that hold rn_i
    if enough == len(order):
        raise AssertionError("place_promise called where the job does not fit")
    units = units[: enough + 1].copy()
    units[-1] = job.units - int(units[:-1].sum())  # the last node holds only what is left
    nodes: list[int] = np.repeat(order[: enough + 1], units).tolist()
    profile.take(job, start, nodes)
    return nodes


def _promise_order(fit: npt.NDArray[np.int64], before: npt.NDArray[np.int64],
                   left: npt.NDArray[np.int64], units: int) -> npt.NDArray[np.int64]:
    """The nodes that hold a unit (`fit` > 0) by (`before`, `left`, node), or at least the
    first `units` of them in that order (each gives one unit at least): on many nodes, the
    few with the least keys are found first (np.partition), then sorted."""
    nodes = np.flatnonzero(fit > 0)
    if len(nodes) <= 4 * units + 64:
        return nodes[np.lexsort((nodes, left[nodes], before[nodes]))]
    ahead, free = before[nodes], left[nodes]
    low_b, low_l = int(ahead.min()), int(free.min())
    width_l, width_n = int(free.max()) - low_l + 1, len(fit)
    if (int(ahead.max()) - low_b + 1) * width_l * width_n >= 2**62:  # the key would overflow
        return nodes[np.lexsort((nodes, free, ahead))]
    key = ((ahead - low_b) * width_l + (free - low_l)) * width_n + nodes  # distinct: node last
    few = np.partition(key, units - 1)[: units] if units < len(key) else key
    few = np.sort(few)
    return few % width_n


def keep_promises(
    problem: Problem,
    held: Mapping[int, tuple[int, list[int]]],
    waiting: Iterable[Job],
    qualifies: Callable[[Job], bool],
    first_fit: bool = False,
    should_stop: StopCheck = never,
    compress: bool = True,
) -> PromisePlan:
    """Place the `held` promises (job index -> (s_i - t, possibly <= 0, nodes)), compress them,
    and promise the earliest start around them to the jobs of `waiting` (submit order) without
    one that `qualify`, and to the oldest until one does not start now (EASY's head).
    Raises Stopped when `should_stop()` turns true before the held promises are placed; once
    they are, a stop leaves the rest where they were, or without a promise. `compress` False:
    no room appeared since the last decision compressed them (`Recalled.room_freed`), and step
    2 is skipped (one pass of it per new room)."""
    plan = PromisePlan(NodeProfile(problem))
    jobs = problem.jobs
    order = sorted(held, key=lambda i: (jobs[i].submit, i))  # oldest first
    _place_held(plan, [(max(held[i][0], 0), jobs[i], held[i][1]) for i in order], first_fit,
                should_stop)
    try:
        if compress:
            _compress(plan, first_fit, should_stop)
        head = False  # the oldest job that does not start now holds a promise
        guard = guard_of(plan)
        for job in waiting:
            kept = plan.starts.get(job.index)
            if kept is not None:
                head = head or kept[0] > 0
                continue
            if head and not qualifies(job):
                continue
            stop_if(should_stop, "new promises")
            start = earliest_guarded(plan.profile, job, guard, should_stop)
            nodes = place_guarded(plan.profile, job, start, guard, first_fit)
            plan.starts[job.index] = (start, nodes)
            if guard is None and start > 0:
                guard = guard_of(plan)
            head = head or start > 0
    except Stopped:
        pass  # the promises placed so far stand; the rest wait for the next decision
    return plan


def _place_held(
    plan: PromisePlan, held: list[tuple[int, Job, list[int]]], first_fit: bool,
    should_stop: StopCheck,
) -> None:
    """Step 1: every held promise, oldest job first, at its start if it still fits, else at the
    earliest start after the older ones. The first (the head's) is placed anew by
    `place_promise`, as EASY places its head at every decision (on the nodes busy until then),
    and the others keep theirs; where that leaves one without room at its start, every promise
    keeps the nodes it held (they fit together, as long as the expected durations held)."""
    profile = plan.profile
    profile.add_boundaries(b for start, job, _ in held for b in (start, start + job.duration))
    if held and _place_head_anew(plan, held, first_fit):
        return
    if profile.take_all(held):  # every promise still fits where it was
        plan.starts.update((job.index, (start, nodes)) for start, job, nodes in held)
        return
    for start, job, nodes in held:
        stop_if(should_stop, "promises")
        if profile.fits_on(job, start, nodes):
            profile.take(job, start, nodes)
        elif profile.fits_at(job, start):
            nodes = place_promise(profile, job, start, first_fit)
        else:
            later = profile.earliest(job, should_stop)
            if later > start:
                plan.moved[job.index] = later - start
                plan.reasons[job.index] = why_moved(profile.problem, nodes, job, start)
            nodes = place_promise(profile, job, later, first_fit)
            start = later
        plan.starts[job.index] = (start, nodes)


def why_moved(problem: Problem, nodes: list[int], job: Job | None = None,
              start: int = 0) -> PromiseMove:
    """Why a held promise planned on `nodes` no longer fits at its start: one of its nodes is
    down (or fewer are up), an unavailability window that does not admit job i now covers one
    of its nodes (any node, where the caller sent the promise without nodes) during
    [start, start + requested_i), or running work is past its requested time (its limit end
    is the next second: it outlived what the promise was planned with), else not known."""
    if any(not problem.eligible[n] for n in nodes):
        return PromiseMove.NODE_UNAVAILABLE
    rules = problem.eligibility
    if rules is not None and job is not None:
        end, on = start + job.at_most, set(nodes)
        if any(w.start < end and w.end > start and (not on or not on.isdisjoint(w.nodes))
               for w in rules.holding(job.index)):
            return PromiseMove.WINDOW
    run = problem.running
    if len(run.ends) and bool((run.limit_ends[run.up] <= 1).any()):
        return PromiseMove.RAN_PAST_LIMIT
    if not all(problem.eligible):
        return PromiseMove.NODE_UNAVAILABLE
    return PromiseMove.UNSPECIFIED


def _place_head_anew(
    plan: PromisePlan, held: list[tuple[int, Job, list[int]]], first_fit: bool,
) -> bool:
    """The held promises at their starts, the first on nodes chosen anew and the others on
    theirs; False (nothing placed) where that leaves one without room."""
    profile = plan.profile
    start, head, _ = held[0]
    if not profile.fits_at(head, start):
        return False
    state = profile.checkpoint()
    nodes = place_promise(profile, head, start, first_fit)
    if not profile.take_all(held[1:]):
        profile.restore(state)
        return False
    plan.starts[head.index] = (start, nodes)
    plan.starts.update((job.index, (s, ns)) for s, job, ns in held[1:])
    return True


def _compress(plan: PromisePlan, first_fit: bool, should_stop: StopCheck) -> None:
    """Step 2: each promise moved to its earliest start if that is earlier, in the papers'
    priority order (highest current slowdown first). Each move has every other promise in
    place, so whatever the order none moves later; the order decides who takes the room a
    job that ended early freed first: the reorder step of promise, pack, reorder."""
    profile, jobs = plan.profile, plan.profile.problem.jobs
    t = profile.problem.t
    guard = guard_of(plan)
    for i in sorted(plan.starts, key=lambda i: slowdown_rank(jobs[i], t)):
        start, nodes = plan.starts[i]
        job = jobs[i]
        stop_if(should_stop, "promise compression")
        if start == 0 or not profile.could_start_before(job, start):  # not even pooled
            continue
        profile.give_back(job, start, nodes)
        try:
            earlier = earliest_guarded(profile, job, guard, should_stop)
        except Stopped:
            profile.take(job, start, nodes)  # stopped: it keeps its promise as it was
            raise
        if earlier < start:
            plan.starts[i] = (earlier, place_guarded(profile, job, earlier, guard, first_fit))
            if guard is not None and i == guard.job:
                guard = guard_of(plan)  # the head moved earlier: so does its guard
        else:  # no gain (never later: its own room is free): it keeps its nodes
            profile.take(job, start, nodes)


# -- the book: promises between decisions ------------------------------------------------------

JobKey = tuple[str, int]  # (job id, q_i)
Release = tuple[int, int, tuple[int, ...]]  # (node, absolute end, amounts) of running work


@dataclass(frozen=True, slots=True)
class Kept:
    """A promise between decisions: absolute start, the node of each unit, the d_i it was
    made with, and the job's shape then (`shape_of`)."""

    start: int
    nodes: tuple[int, ...]
    duration: int
    shape: tuple[object, ...] = ()


def shape_of(job: Job) -> tuple[object, ...]:
    """What a promise is made for: rn_i, the request per unit, the requested time."""
    return job.units, job.req, job.requested


@dataclass(slots=True)
class _Entry:
    t: int  # time of the last decision
    before: dict[JobKey, Kept]  # the promises held when it began
    after: dict[JobKey, Kept]  # the promises it left
    # The running work it left (what it started included); None where it left no promise
    # (nothing to compare it with at the next decision).
    releases: Counter[Release] | None
    eligible: tuple[bool, ...]  # which nodes were up
    windows: tuple[Window, ...] = ()  # the unavailability windows, absolute (`_windows`)


@dataclass(frozen=True, slots=True)
class Recalled:
    """What a decision at t starts from: the promises held (job index -> (s_i - t, nodes)) and
    whether anything can have freed room before one of them since they were last compressed
    (a job ended before its expected end, a promised job left the queue or got shorter, a node
    came up). Without such room no promise can move earlier, and compressing is skipped."""

    key: BookKey
    held: dict[int, tuple[int, list[int]]]
    room_freed: bool
    before: dict[JobKey, Kept]


class PromiseBook:
    """The promises each waiting job holds, per caller scope and node list (`BookKey`), between
    decisions. A decision at an earlier time than the last one of the same book starts afresh
    (a new replay); one at the same time starts from what the last one began with (a retry)."""

    def __init__(self, capacity: int = 64) -> None:
        self._entries: OrderedDict[BookKey, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self._capacity = capacity

    def recall(self, problem: Problem, scope: CallerScope) -> Recalled:
        """What the jobs of `scope`'s decision at t on this node list hold."""
        key, t = book_key(scope, problem), problem.t
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
        if entry is None or t < entry.t:
            return Recalled(key, {}, True, {})
        kept = entry.after if t > entry.t else entry.before
        if not kept:  # no promise to keep: nothing to place or compress
            return Recalled(key, {}, True, kept)
        index = {(job.id, job.submit): job for job in problem.jobs}
        held = {index[k].index: (p.start - t, list(p.nodes)) for k, p in kept.items()
                if k in index}
        freed = t == entry.t or _room_freed(problem, entry, kept, index)
        return Recalled(key, held, freed, kept)

    def record(self, problem: Problem, recalled: Recalled,
               starts: Mapping[int, tuple[int, list[int]]],
               started: dict[int, list[int]]) -> None:
        """Keep the promises a decision leaves (`starts`, as `PromisePlan.starts`; those due
        now are started) and the running work after it: the snapshot's and what `started`
        (job index -> nodes) adds."""
        t, jobs = problem.t, problem.jobs
        after = {(jobs[i].id, jobs[i].submit): Kept(t + s, tuple(nodes), jobs[i].duration,
                                                    shape_of(jobs[i]))
                 for i, (s, nodes) in starts.items() if s > 0}
        releases = None
        if after:  # the next decision compares the running work with this
            releases = _releases(problem)
            for i, nodes in started.items():  # one block per node, as the running table has
                req = jobs[i].req
                for n, units in Counter(nodes).items():
                    releases[(n, t + jobs[i].duration, tuple(units * r for r in req))] += 1
        entry = _Entry(t, recalled.before, after, releases, tuple(problem.eligible),
                       _windows(problem))
        with self._lock:
            self._entries[recalled.key] = entry
            self._entries.move_to_end(recalled.key)
            while len(self._entries) > self._capacity:
                self._entries.popitem(last=False)


def _windows(problem: Problem) -> tuple[Window, ...]:
    """The problem's unavailability windows with absolute times (seconds, the caller's
    clock), as a decision at another t compares them."""
    rules = problem.eligibility
    if rules is None:
        return ()
    t = problem.t
    return tuple(dataclasses.replace(w, start=w.start + t, end=w.end + t) for w in rules.windows)


def _releases(problem: Problem) -> Counter[Release]:
    """The running work as (node, absolute end, amounts), with how many such blocks."""
    run, t = problem.running, problem.t
    return Counter(zip(run.nodes.tolist(), (run.ends + t).tolist(),
                       map(tuple, run.amounts.tolist()), strict=True))


def _room_freed(
    problem: Problem, entry: _Entry, kept: dict[JobKey, Kept], index: dict[JobKey, Job],
) -> bool:
    """Whether room may have appeared before some promise since the last decision (see
    `Recalled`)."""
    t = problem.t
    if any(now and not was for now, was in zip(problem.eligible, entry.eligible, strict=True)):
        return True  # a node came up
    if entry.windows or problem.eligibility is not None:
        now_windows = _windows(problem)
        if any(w not in now_windows for w in entry.windows if w.end > t):
            return True  # a window that was to come or under way is gone or changed
    for key, promise in kept.items():
        job = index.get(key)
        if job is None or job.duration < promise.duration:
            return True  # left the queue (not at its promise), or got shorter
    if entry.releases is None:
        return True  # not recorded: assume room appeared
    now = _releases(problem)
    # Running work the last decision counted on until after t that is gone or ends earlier.
    return any(end > t and now[(n, end, amounts)] < count
               for (n, end, amounts), count in entry.releases.items())
