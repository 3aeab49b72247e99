"""EASY's protection: a reservation for one blocked job, and what others may use meanwhile.

The head (a job that cannot start at t) gets the earliest time τ at which enough units fit node
by node, given the predicted ends of the running work and of the jobs already started at t, on
the nodes that leave the most of what is free now to the others (`head_nodes`).
A job that starts now and runs past τ may only use `limit`: on each node, what is free now and
also left free at τ by the head's units. Used by EASY, and by the CP dispatchers' `protect_head`.

A head the site's rules restrict (E_i, or a window that does not admit it: `planning.eligibility`)
is reserved on the planner (`NodeProfile`), which reads those rules at every start it tries: τ
is the earliest start at which its units fit on nodes of E_i that no such window covers during
[τ, τ + requested_i) (after the window where it waits for one), and its units are placed there.
"""

from __future__ import annotations

import heapq
import threading
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ...domain.free_pool import FreePool, Vec, minus, units_per_node
from .capacity_profile import CapacityProfile
from .node_profile import NodeProfile
from .problem import Job, Problem, stable_order
from .protected_room import NodeBlock, PooledBlock
from .stopping import StopCheck, never, stop_if


class FreeVectors:
    """Free amount per resource type on each node, as a plain list (no groups): what is free
    at the head's reserved start τ. Only read node by node and taken from, so it needs none of
    `FreePool`'s groups."""

    __slots__ = ("free",)

    def __init__(self, free: list[Vec]) -> None:
        self.free = free

    def copy(self) -> FreeVectors:
        return FreeVectors(list(self.free))

    def take_all(self, nodes: Iterable[int], req: Vec) -> None:
        """Take `req` once per entry of `nodes` (what `FreePool.take_all` does to the vectors)."""
        free = self.free
        for n, c in Counter(nodes).items():
            free[n] = minus(free[n], req, c)


@dataclass(slots=True)
class Reservation:
    job: Job
    start: int  # τ, relative to t
    at_start: FreeVectors  # free at τ with the head's units taken
    limit: FreePool  # per node: min(free now, at_start)
    nodes: tuple[int, ...] = ()  # the head's node of each unit at τ
    # For `pooled_start`, computed when first asked (EASY never asks).
    problem: Problem | None = None
    _pooled_start: int | None = None

    @property
    def pooled_start(self) -> int:
        """Start of the head's block in the pooled view after t: τ, or later where that view
        releases running work later than the node-level τ saw it (see
        Problem.pooled_releases)."""
        if self._pooled_start is None:
            assert self.problem is not None, "a reservation made without its problem"
            self._pooled_start = self.problem.pooled_profile().earliest_start(
                self.job.demand(), self.job.duration, self.start)
        return self._pooled_start

    def copy(self) -> Reservation:
        return Reservation(
            self.job, self.start, self.at_start.copy(), self.limit.copy(), self.nodes,
            self.problem, self._pooled_start,
        )

    def block(self) -> tuple[int, int, Vec]:
        """The head's block in the pooled view after t: (start, duration, demand)."""
        return self.pooled_start, self.job.duration, self.job.demand()

    # -- as a ProtectedRoom (`protected_room`): the head's block is what is protected ------

    def pooled_profile(self, problem: Problem) -> CapacityProfile:
        profile = problem.pooled_profile()
        start, duration, demand = self.block()
        profile.reserve(demand, start, duration)
        return profile

    def pooled_fixed(self, problem: Problem) -> list[PooledBlock]:
        running = [(0, end, amounts) for end, amounts in problem.pooled_releases()]
        return [*running, self.block()]

    def node_fixed(self) -> list[NodeBlock]:
        end = self.start + self.job.duration
        return [(n, self.start, end, tuple(k * r for r in self.job.req))
                for n, k in Counter(self.nodes).items()]

    def pool_for(self, job: Job, free_now: FreePool) -> FreePool | None:
        return self.limit if self.runs_past(job) else None

    def place(self, free_now: FreePool, job: Job, first_fit: bool) -> list[int] | None:
        return place_around_reservation(free_now, self, job, first_fit)

    def held_jobs(self) -> frozenset[int]:
        return frozenset((self.job.index,))

    def fill_order(self, job: Job) -> int:
        return int(not self.runs_past(job))

    def runs_past(self, job: Job) -> bool:
        """Whether `job`, started now, is still running at τ (and so must stay in `limit`)."""
        return job.duration > self.start

    def take(self, free_now: FreePool, nodes: list[int], job: Job) -> None:
        """Record that `job` starts now on `nodes`, already taken from `free_now`."""
        if self.runs_past(job):
            self.at_start.take_all(nodes, job.req)
        now, at, limit = free_now.free, self.at_start.free, self.limit
        for n in set(nodes):
            vec = tuple(map(min, now[n], at[n]))
            if vec != limit.free[n]:  # (an unchanged node keeps its place: same choices)
                limit.set(n, vec)


def place_around_reservation(
    free_now: FreePool, reservation: Reservation | None, job: Job, first_fit: bool = False
) -> list[int] | None:
    """Place `job` at t (taking from `free_now`) without touching the head's reservation."""
    if reservation is not None and reservation.runs_past(job):
        nodes = reservation.limit.choose(job.req, job.units, first_fit)
        if nodes is None:
            return None
        free_now.take_all(nodes, job.req)
    else:
        nodes = free_now.place(job.req, job.units, first_fit)
        if nodes is None:
            return None
    if reservation is not None:
        reservation.take(free_now, nodes, job)
    return nodes


def head_nodes(at_start: FreePool, free_now: FreePool, head: Job) -> list[int]:
    """Nodes for the head's units at τ (one entry per unit), keeping `limit` as large as it can.

    What a node has free now and the head takes at τ is lost to every job that would start now
    and run past τ. So nodes with nothing free now come first, then the others by how little
    they have free now; within each, best fit at τ (the pool's own rule), then node order.
    Groups of `at_start` with the same score are taken in the pool's order of its groups.
    """
    with_free: set[int] = set().union(*free_now.groups.values())
    fitting = sorted(
        ((at_start.score(vec), units_per_node(vec, head.req), nodes)
         for vec, nodes in at_start.groups.items() if units_per_node(vec, head.req) > 0),
        key=lambda group: group[0],
    )
    chosen: list[int] = []
    for _, k, nodes in fitting:  # nodes with nothing free now
        need = head.units - len(chosen)
        for n in heapq.nsmallest(-(-need // k), nodes - with_free):
            chosen.extend([n] * min(k, head.units - len(chosen)))
        if len(chosen) == head.units:
            return chosen
    partial = sorted(
        (free_now.score(free_now.free[n]), score, n, k)
        for score, k, nodes in fitting for n in nodes & with_free
    )
    for _, _, n, k in partial:
        chosen.extend([n] * min(k, head.units - len(chosen)))
        if len(chosen) == head.units:
            return chosen
    raise AssertionError("head_nodes called where the head does not fit")


def _head_nodes_by_node(
    free_now: FreePool, at: list[Vec], touched: list[int], head: Job
) -> list[int] | None:
    """`head_nodes` of the pool at τ whose vectors are `at` (free now but on `touched`, the
    nodes some release up to τ gives to), node by node instead of by the pool's groups; None
    where its choice would depend on the order of the pool's groups (two groups of one score
    both holding nodes with nothing free now), which only `head_nodes` on that pool knows.

    Only a touched node can have nothing free now and room at τ, so the first pass of
    `head_nodes` sorts the touched nodes by (score at τ, node); the second pass its key over
    the nodes free now: the touched ones, and of each group of `free_now` (unchanged at τ:
    both scores the group's) its lowest-numbered nodes, enough for every unit left.
    """
    req, units = head.req, head.units
    score, now, eligible = free_now.score, free_now.free, free_now.eligible
    first: list[tuple[float, int, int]] = []  # (score at τ, node, units per node)
    second: list[tuple[float, float, int, int]] = []
    seen: dict[float, Vec] = {}
    for n in touched:
        vec = at[n]
        k = units_per_node(vec, req)
        if not k or not eligible[n]:
            continue
        if any(now[n]):  # free now
            second.append((score(now[n]), score(vec), n, k))
            continue
        s = score(vec)
        if seen.setdefault(s, vec) != vec:
            return None  # groups of one score: the pool's order of them decides
        first.append((s, n, k))
    chosen: list[int] = []
    first.sort()
    for _, n, k in first:
        chosen.extend([n] * min(k, units - len(chosen)))
        if len(chosen) == units:
            return chosen
    left = units - len(chosen)
    moved = set(touched)
    for vec, nodes in free_now.groups.items():
        k = units_per_node(vec, req)
        if not k:
            continue
        s = score(vec)
        inside = len(moved) if len(moved) < len(nodes) else len(nodes)
        for n in free_now.smallest(vec, left + inside):
            if n not in moved:
                second.append((s, s, n, k))
    second.sort()
    for _, _, n, k in second:
        chosen.extend([n] * min(k, units - len(chosen)))
        if len(chosen) == units:
            return chosen
    raise AssertionError("head_nodes called where the head does not fit")


def reserve(
    problem: Problem,
    free_now: FreePool,
    head: Job,
    started: Iterable[tuple[Job, list[int]]] = (),
    should_stop: StopCheck = never,
) -> Reservation:
    """Reserve for `head` given `free_now` (free at t after the jobs in `started` took theirs).

    Raises Stopped when `should_stop()` turns true.
    """
    stop_if(should_stop, "head reservation")
    if problem.eligibility is not None and problem.eligibility.restricts(head.index):
        return _reserve_on_profile(problem, free_now, head, started, should_stop)
    events = problem.release_events()
    # The jobs started at t release their units at their d_j, after the running work ending
    # then (the order inside one end does not change what is free once it has passed).
    extra = [(job.duration, n, job.req) for job, nodes in started for n in nodes]
    ends, nodes, amounts = events.ends, events.nodes, events.amounts
    if extra:
        ends = np.concatenate((ends, np.fromiter((e for e, _, _ in extra), dtype=np.int64)))
        nodes = np.concatenate((nodes, np.fromiter((n for _, n, _ in extra), dtype=np.int64)))
        amounts = np.concatenate(
            (amounts, np.asarray([a for _, _, a in extra], dtype=np.int64).reshape(
                len(extra), len(problem.resources)))
        )
        order = stable_order(ends)
        ends, nodes, amounts = ends[order], nodes[order], amounts[order]
    now = free_now.free
    at = list(now)
    if len(ends) * amounts.shape[1] <= SMALL_SWEEP:
        # Free at τ per node comes out of the sweep, which stops at τ.
        last, at_tau = _first_release_fitting_small(free_now, head, ends, nodes, amounts)
        touched = sorted(at_tau)
        for n in touched:
            at[n] = tuple(at_tau[n])
    else:
        last = _first_release_fitting(free_now, head, ends, nodes, amounts)
        # Free at τ: free now plus every release up to τ, summed per node.
        touched_array, inverse = np.unique(nodes[: last + 1], return_inverse=True)
        touched = touched_array.tolist()
        given = np.zeros((len(touched), amounts.shape[1]), dtype=np.int64)
        np.add.at(given, inverse.reshape(-1), amounts[: last + 1])
        for n, row in zip(touched, given.tolist(), strict=True):
            at[n] = tuple([a + g for a, g in zip(now[n], row, strict=True)])
    stop_if(should_stop, "head reservation")
    end = int(ends[last])
    placed = _head_nodes_by_node(free_now, at, touched, head)
    if placed is None:  # the pool at τ as the releases make it, in their order
        pool = free_now.copy()
        for n, release in zip(nodes[: last + 1].tolist(), amounts[: last + 1].tolist(),
                              strict=True):
            pool.give(n, tuple(release))
        placed = head_nodes(pool, free_now, head)
    at_start = FreeVectors(at)
    at_start.take_all(placed, head.req)
    # Away from the head's nodes, at τ holds at least what is free now (releases only add).
    limit = free_now.copy()
    for n in set(placed):
        vec = tuple(map(min, now[n], at[n]))
        if vec != now[n]:
            limit.set(n, vec)
    return Reservation(head, end, at_start, limit, tuple(placed), problem)


def _reserve_on_profile(
    problem: Problem,
    free_now: FreePool,
    head: Job,
    started: Iterable[tuple[Job, list[int]]],
    should_stop: StopCheck,
) -> Reservation:
    """`reserve` for a head the site's rules restrict: τ and its nodes from the planner, which
    holds the running work and the jobs `started` now, and reads E_i and the windows."""
    profile = NodeProfile(problem)
    for job, nodes in started:
        profile.take(job, 0, nodes, fits=True)
    start = profile.earliest(head, should_stop)
    placed = profile.place(head, start)
    at = [tuple(row) for row in profile.free_at(start).tolist()]  # the head's units taken
    now = free_now.free
    limit = free_now.copy()
    for n in set(placed):
        vec = tuple(map(min, now[n], at[n]))
        if vec != now[n]:
            limit.set(n, vec)
    return Reservation(head, start, FreeVectors(at), limit, tuple(placed), problem)


def _units(free: npt.NDArray[np.int64], req: Vec) -> npt.NDArray[np.int64]:
    """units_per_node of `req` for each row of `free`."""
    used = [r for r, q in enumerate(req) if q > 0]
    if not used:
        return np.zeros(len(free), dtype=np.int64)
    result: npt.NDArray[np.int64] = np.min(
        free[:, used] // np.asarray([req[r] for r in used], dtype=np.int64), axis=1
    )
    return result


# Releases × resource types up to which the head's τ is found by a sweep in Python, stopping at
# τ, rather than by numpy over every release: on few releases numpy's fixed cost per call is
# most of the time (a small system's decisions: issue #52).
SMALL_SWEEP = 1024


def _first_release_fitting_small(
    free_now: FreePool,
    head: Job,
    ends: npt.NDArray[np.int64],
    nodes: npt.NDArray[np.int64],
    amounts: npt.NDArray[np.int64],
) -> tuple[int, dict[int, list[int]]]:
    """`_first_release_fitting`, release by release until τ, and what is free at τ on each
    node some release up to τ gives to (free now plus those releases)."""
    req, demand = head.req, head.demand()
    used = [(r, q) for r, q in enumerate(req) if q > 0]

    def units(vec: list[int] | Vec) -> int:  # `_units` of one row (not clipped at 0)
        return min([vec[r] // q for r, q in used]) if used else 0

    width = amounts.shape[1]
    pooled = [0] * width
    units_total = 0
    for vec, group in free_now.groups.items():
        size = len(group)
        pooled = [p + v * size for p, v in zip(pooled, vec, strict=True)]
        units_total += units_per_node(vec, req) * size
    free = free_now.free
    ends_list, nodes_list = ends.tolist(), nodes.tolist()
    last = len(ends_list) - 1
    if width == 1 and used:  # one resource type (processors): plain ints
        return _one_type_sweep(free, req[0], head.units, demand[0], pooled[0], units_total,
                               ends_list, nodes_list, amounts[:, 0].tolist())
    at: dict[int, list[int]] = {}
    for i, release in enumerate(amounts.tolist()):
        n = nodes_list[i]
        before = at.get(n)
        if before is None:
            before = list(free[n])
        after = [b + a for b, a in zip(before, release, strict=True)]
        at[n] = after
        units_total += units(after) - units(before)
        pooled = [p + a for p, a in zip(pooled, release, strict=True)]
        if (i == last or ends_list[i + 1] != ends_list[i]) and units_total >= head.units and all(
                p >= d for p, d in zip(pooled, demand, strict=True)):
            return i, at
    raise AssertionError("a job that fits an empty system must fit once all work ends")


def _one_type_sweep(
    free: list[Vec], q: int, units: int, demand: int, pooled: int, units_total: int,
    ends: list[int], nodes: list[int], amounts: list[int],
) -> tuple[int, dict[int, list[int]]]:
    """`_first_release_fitting_small` where nodes have one resource type, of which each unit
    asks q > 0."""
    at: dict[int, int] = {}
    last = len(ends) - 1
    for i, amount in enumerate(amounts):
        n = nodes[i]
        before = at.get(n)
        if before is None:
            before = free[n][0]
        after = before + amount
        at[n] = after
        units_total += after // q - before // q
        pooled += amount
        if (i == last or ends[i + 1] != ends[i]) and units_total >= units and pooled >= demand:
            return i, {n: [a] for n, a in at.items()}
    raise AssertionError("a job that fits an empty system must fit once all work ends")


def _first_release_fitting(
    free_now: FreePool,
    head: Job,
    ends: npt.NDArray[np.int64],
    nodes: npt.NDArray[np.int64],
    amounts: npt.NDArray[np.int64],
) -> int:
    """Index of the last release of the earliest end at which the head fits node by node.

    One sweep over the releases in order: the pooled free amounts (a cheap necessary
    condition) and the units of the head that fit, each kept as a running sum of what every
    release adds (on its node, units after it minus units before it).
    """
    if not len(ends):
        raise AssertionError("a job that fits an empty system must fit once all work ends")
    # Pooled and unit counts of the pool as it is now (groups hold its eligible, non-empty
    # nodes; releases only touch eligible nodes).
    pooled_now = np.zeros(amounts.shape[1], dtype=np.int64)
    units_now = 0
    for vec, group in free_now.groups.items():
        pooled_now += np.asarray(vec, dtype=np.int64) * len(group)
        units_now += units_per_node(vec, head.req) * len(group)
    pooled = pooled_now + np.cumsum(amounts, axis=0)
    # Per node, free before and after each of its releases, in release order.
    by_node = stable_order(nodes)
    sorted_nodes = nodes[by_node]
    node_ids, first = np.unique(sorted_nodes, return_index=True)
    base = np.asarray([free_now.free[n] for n in node_ids.tolist()], dtype=np.int64).reshape(
        len(node_ids), amounts.shape[1]
    )
    running = np.cumsum(amounts[by_node], axis=0)
    segment = np.searchsorted(node_ids, sorted_nodes)
    before_segment = np.vstack((np.zeros((1, amounts.shape[1]), dtype=np.int64), running))[first]
    after = base[segment] + running - before_segment[segment]
    gained = np.empty(len(ends), dtype=np.int64)
    gained[by_node] = _units(after, head.req) - _units(after - amounts[by_node], head.req)
    units = units_now + np.cumsum(gained)
    # The pool is checked once every release of an end has been given.
    boundary = np.flatnonzero(np.append(ends[1:] != ends[:-1], True))
    fits = np.all(pooled[boundary] >= np.asarray(head.demand(), dtype=np.int64), axis=1) & (
        units[boundary] >= head.units
    )
    hits = np.flatnonzero(fits)
    if not len(hits):
        raise AssertionError("a job that fits an empty system must fit once all work ends")
    return int(boundary[hits[0]])


@dataclass(frozen=True, slots=True)
class _Kept:
    """A reservation made with no job started before it, and what it was made from."""

    t: int
    released_at: npt.NDArray[np.int64]  # absolute release times of the running work
    release_nodes: npt.NDArray[np.int64]
    release_amounts: npt.NDArray[np.int64]
    free: list[Vec]
    eligible: list[bool]
    scale: Vec
    head: tuple[str, Vec, int, int]  # id, req, units, d_i
    reservation: Reservation  # never handed out: callers get copies


class KeptReservation:
    """The last head reservation made with nothing started before the head, kept for the next
    decision: one at which nothing ended, started or changed on the nodes (a job was only
    submitted behind the head) has the same head, the same free amounts and the same running
    work releasing at the same times, so `reserve` would make the same reservation again (τ
    the same time, so τ - t moves with t). It is handed out as a copy when every one of those
    inputs is equal, and made anew otherwise. One entry per thread (equal inputs give equal
    reservations whoever asked, but the kept pool's heaps must not be read by two threads at
    once: `FreePool.smallest` takes nodes off a heap and puts them back)."""

    def __init__(self) -> None:
        self._local = threading.local()

    def reserve(self, problem: Problem, free_now: FreePool, head: Job,
                should_stop: StopCheck = never) -> Reservation:
        """`reserve(problem, free_now, head, (), should_stop)`."""
        if problem.eligibility is not None:  # the rules are not part of what is compared
            return reserve(problem, free_now, head, (), should_stop)
        events = problem.release_events()
        released_at = events.ends + problem.t
        key = (head.id, head.req, head.units, head.duration)
        kept: _Kept | None = getattr(self._local, "kept", None)
        if (kept is not None and kept.head == key and kept.scale == free_now.scale
                and np.array_equal(kept.released_at, released_at)
                and np.array_equal(kept.release_nodes, events.nodes)
                and np.array_equal(kept.release_amounts, events.amounts)
                and kept.free == free_now.free and kept.eligible == free_now.eligible):
            stop_if(should_stop, "head reservation")
            same = kept.reservation
            return Reservation(head, same.start + kept.t - problem.t, same.at_start.copy(),
                               same.limit.copy(), same.nodes, problem)
        reservation = reserve(problem, free_now, head, (), should_stop)
        self._local.kept = _Kept(problem.t, released_at, events.nodes, events.amounts,
                           list(free_now.free), list(free_now.eligible), free_now.scale, key,
                           reservation.copy())
        return reservation
