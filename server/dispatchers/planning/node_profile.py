"""Free amounts per node and resource type over time after t: the plan of conservative backfilling.

A step function: step k holds from times[k] until times[k + 1] (relative to t, 0 = now), and
the last step lasts forever. It starts as what is free now plus the predicted releases of the
running work, and each reservation takes its units from the steps it spans. Arrays of shape
(steps, nodes, resource types) keep a fit test over a job's whole run vectorised; the pooled
view (the sum over nodes, one row per step, kept alongside) finds candidate start times first,
since a job that does not fit the pooled capacity cannot fit node by node.

The arrays keep spare rows at their end, so that a new step boundary (a reservation starting or
ending between two boundaries) shifts the later steps by one row in place instead of copying
the whole profile, and a reservation touches only the columns of the nodes it holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from itertools import chain

import numpy as np
import numpy.typing as npt

from ...domain.free_pool import Vec, choose_from_array
from .capacity_profile import first_room, room_now
from .problem import Job, Problem
from .stopping import StopCheck, never, stop_if

Counts = npt.NDArray[np.int64]
# times, free, pooled (used steps only), and whether some free amount may be negative.
State = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], bool]


@lru_cache(maxsize=1 << 12)
def request_array(req: Vec) -> Counts:
    """The per-unit request as a read-only array (the same few requests recur all the time)."""
    array = np.asarray(req, dtype=np.int64)
    array.flags.writeable = False
    return array


class NodeProfile:
    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        eligible = np.asarray(problem.eligible, dtype=bool)
        self._eligible = eligible
        shape = (len(problem.node_ids), len(problem.resources))
        now = np.asarray(problem.free_now.free, dtype=np.int64).reshape(shape)
        now[~eligible] = 0  # nodes that are not up never receive work
        events = problem.release_events()  # eligible nodes only, ends >= 1, sorted
        ends, step_of = np.unique(events.ends, return_inverse=True)
        released = np.zeros((len(ends) + 1, *shape), dtype=np.int64)
        np.add.at(released, (step_of.reshape(-1) + 1, events.nodes), events.amounts)
        free = np.cumsum(released, axis=0)
        free += now
        self._times: npt.NDArray[np.int64] = np.concatenate(([0], ends)).astype(np.int64)
        self._free: npt.NDArray[np.int64] = free
        self._pooled: npt.NDArray[np.int64] = free.sum(axis=1)
        self._steps = len(self._times)  # rows in use; the rest are spare
        self._releases = self._times.copy()  # the boundaries of the running work
        self._negative = bool((free < 0).any())  # some node overfull: fit tests scan them all
        # The last fit `earliest` found: (start, d_i, request, free during the run, units per
        # node), dropped whenever an amount changes.
        self._seen: tuple[int, int, Vec, Counts, Counts] | None = None

    @property
    def times(self) -> npt.NDArray[np.int64]:
        """Start of each step (a view)."""
        return self._times[: self._steps]

    @property
    def free(self) -> npt.NDArray[np.int64]:
        """Free amounts per step, node and type (a view): (steps, nodes, types)."""
        return self._free[: self._steps]

    @property
    def pooled(self) -> npt.NDArray[np.int64]:
        """Free amounts per step and type, summed over nodes (a view): (steps, types)."""
        return self._pooled[: self._steps]

    def _steps_of(self, start: int, end: int) -> tuple[int, int]:
        """Indices [first, stop) of the steps that overlap [start, end)."""
        times = self.times
        first = int(times.searchsorted(start, side="right")) - 1
        stop = int(times.searchsorted(end, side="left"))
        return first, max(stop, first + 1)

    def _grow(self, rows: int) -> None:
        """Room for at least `rows` steps (doubling, so that splits cost amortised O(1) rows)."""
        size = max(rows, 2 * len(self._times))
        n = self._steps
        for name in ("_times", "_free", "_pooled"):
            old = getattr(self, name)
            new = np.empty((size, *old.shape[1:]), dtype=np.int64)
            new[:n] = old[:n]
            setattr(self, name, new)

    def _split(self, when: int) -> int:
        """Index of the step that starts exactly at `when`, creating it if needed."""
        n = self._steps
        i = int(self._times[:n].searchsorted(when, side="right")) - 1
        if self._times[i] == when:
            return i
        if n == len(self._times):
            self._grow(n + 1)
        for array in (self._times, self._free, self._pooled):
            array[i + 2 : n + 1] = array[i + 1 : n]  # numpy copies overlapping rows safely
            array[i + 1] = array[i]
        self._times[i + 1] = when
        self._steps = n + 1
        return i + 1

    def add_boundaries(self, whens: Iterable[int]) -> None:
        """Make every time in `whens` (>= 0) a step boundary at once; the function stays the same.

        Many reservations placed one after another then split no step, which would shift
        the later rows once per boundary."""
        times = self.times
        new = np.union1d(times, np.fromiter(whens, dtype=np.int64))
        if len(new) == len(times):
            return
        self._seen = None
        rows = times.searchsorted(new, side="right") - 1
        self._times = new
        self._free = self._free[rows]
        self._pooled = self._pooled[rows]
        self._steps = len(new)

    def keep_boundaries(self, whens: Iterable[int]) -> None:
        """Drop the step boundaries that are neither in `whens` nor an end of running work.

        Only for boundaries no reservation starts or ends at: each such step equals the one
        before it, so the function stays the same, with the steps it would have had without
        `add_boundaries`."""
        times = self.times
        keep = np.isin(times, np.fromiter(whens, dtype=np.int64)) | np.isin(
            times, self._releases)
        if keep.all():
            return
        self._seen = None
        self._times = times[keep]
        self._free = self.free[keep]
        self._pooled = self._pooled[: self._steps][keep]
        self._steps = len(self._times)

    def free_during(self, start: int, end: int) -> npt.NDArray[np.int64]:
        """Per node and type, the least free amount over [start, end): (nodes, types)."""
        first, stop = self._steps_of(start, end)
        result: npt.NDArray[np.int64] = self._free[first:stop].min(axis=0)
        return result

    @staticmethod
    def units_fitting(free: npt.NDArray[np.int64], job: Job) -> Counts:
        """Units of job i that fit on each node into `free` (one unit never spans nodes)."""
        req = request_array(job.req)
        asked = req > 0
        if not asked.any():
            return np.zeros(free.shape[0], dtype=np.int64)
        fit: Counts = (free[:, asked] // req[asked]).min(axis=1)
        return fit

    def earliest(self, job: Job, should_stop: StopCheck = never, not_before: int = 0) -> int:
        """Earliest start s >= `not_before` (relative to t) at which rn_i units of job i fit
        node by node for all of d_i. Raises Stopped when `should_stop()` turns true (once per
        candidate).

        The candidates are what `first_room` gives one after another in the pooled view:
        `not_before`, then every step boundary after it, where the pooled view has room over
        the whole run (all found at once). Node by node, a candidate's test is the units of
        job i per node and step (floor division is monotone, so the least over the steps of
        the run is the units that fit into `free_during` of the run) summed over nodes: the
        runs' first and last steps only move forward, so their least units per node come
        from a queue of two stacks (suffix minima in front, a running minimum behind), each
        step read about twice instead of once per candidate whose run covers it."""
        req = request_array(job.req)
        asked = req > 0
        if not asked.any():
            return self._earliest_window_by_window(job, should_stop, not_before)
        n = self._steps
        times, pooled = self._times[:n], self._pooled[:n]
        duration = job.duration
        # The first candidate as one at a time would test it: often it fits (a small system).
        stop_if(should_stop, "conservative reservation")
        start = first_room(times, pooled, job.demand(), duration, not_before)
        free_run = self.free_during(start, start + duration)
        fit = self.units_fitting(free_run, job)
        if int(fit.sum()) >= job.units:
            self._seen = (start, duration, job.req, free_run, fit)
            return start
        first = int(times.searchsorted(start, side="right"))
        if first == n:
            raise AssertionError("a job that fits an empty system must fit once all ends")
        return self._earliest_from(job, first, req, should_stop)

    def _pooled_candidates(self, job: Job, first: int) -> tuple[Counts, Counts, Counts, Counts]:
        """The candidates after the first, as `first_room` gives them one after another:
        candidate k starts at times[first + k], its run's steps are [lows[k], highs[k]); and
        `room`, the k whose run the pooled view holds job i's demand over."""
        n = self._steps
        times, pooled = self._times[:n], self._pooled[:n]
        starts = times[first:].copy()
        lows = np.arange(first, n)
        highs = np.maximum(times.searchsorted(starts + job.duration, side="left"), lows + 1)
        short = ~np.all(pooled[first:] >= np.asarray(job.demand(), dtype=np.int64), axis=1)
        short_before = np.zeros(n - first + 1, dtype=np.int64)
        np.cumsum(short, out=short_before[1:])
        room = np.flatnonzero(short_before[highs - first] == short_before[lows - first])
        return starts, lows, highs, room

    def _earliest_from(self, job: Job, first: int, req: Counts, should_stop: StopCheck) -> int:
        """`earliest` among the candidates from times[first] on, all tested at once (see
        `earliest`)."""
        n = self._steps
        duration = job.duration
        starts, lows, highs, room = self._pooled_candidates(job, first)
        asked = req > 0
        wanted, units = [(r, int(req[r])) for r in np.flatnonzero(asked).tolist()], job.units
        free = self._free
        # Units of job i per node and step, and their sum over nodes per step (at least the
        # sum over nodes of their least over a run: a run where it falls short anywhere fails
        # node by node too), for the steps [first, cached), a block at a time.
        per_step = np.empty((n - first, free.shape[1]), dtype=np.int64)
        totals = np.empty(n - first + 1, dtype=np.int64)
        cached = first
        front_low = front_high = 0  # suffix minima of the steps [front_low, front_high)
        suffix = per_step[:0]
        behind: Counts | None = None  # least units of the steps [front_high, pushed)
        pushed = 0
        at, left = 0, room
        while len(left):
            stop_if(should_stop, "conservative reservation")
            upto = min(n, max(int(highs[left[0]]), cached + max(64, cached - first)))
            block = per_step[cached - first : upto - first]
            for r, (column, need) in enumerate(wanted):  # type by type: scalar divisions
                if r == 0:
                    np.floor_divide(free[cached:upto, :, column], need, out=block)
                else:
                    np.minimum(block, free[cached:upto, :, column] // need, out=block)
            totals[cached - first : upto - first] = block.sum(axis=1)
            cached = upto
            at = int(highs[left].searchsorted(cached, side="right"))
            ready, left = left[:at], left[at:]
            bounds = np.empty(2 * len(ready), dtype=np.int64)
            bounds[0::2], bounds[1::2] = lows[ready] - first, highs[ready] - first
            least_total = np.minimum.reduceat(totals[: cached - first + 1], bounds)[0::2]
            for k in ready[least_total >= units].tolist():
                stop_if(should_stop, "conservative reservation")
                low, high = int(lows[k]), int(highs[k])
                if low >= front_high:  # the front is used up: the run's steps become it
                    steps = per_step[low - first : high - first]
                    suffix = np.minimum.accumulate(steps[::-1], axis=0)[::-1]
                    front_low, front_high, behind, pushed = low, high, None, high
                elif high > pushed:
                    more = per_step[pushed - first : high - first].min(axis=0)
                    behind = more if behind is None else np.minimum(behind, more)
                    pushed = high
                least = suffix[low - front_low]
                if behind is not None:
                    least = np.minimum(least, behind)
                if int(least.sum()) >= units:
                    start = int(starts[k])
                    free_run = self.free_during(start, start + duration)
                    fit = self.units_fitting(free_run, job)
                    # What `place` at this start reads again, unless the profile changes first.
                    self._seen = (start, duration, job.req, free_run, fit)
                    return start
        # Past the last step nothing changes any more: the pooled test was exact there only
        # if nodes can hold the job, which `never_fits` checked before.
        raise AssertionError("a job that fits an empty system must fit once all ends")

    def _earliest_window_by_window(self, job: Job, should_stop: StopCheck = never,
                                   not_before: int = 0) -> int:
        """`earliest` one candidate at a time, each run's free amounts read anew (a job that
        asks for nothing: no units per node to keep)."""
        demand = job.demand()
        times, pooled = self.times, self._pooled[: self._steps]
        while True:
            stop_if(should_stop, "conservative reservation")
            start = first_room(times, pooled, demand, job.duration, not_before)
            free = self.free_during(start, start + job.duration)
            fit = self.units_fitting(free, job)
            if int(fit.sum()) >= job.units:
                # What `place` at this start reads again, unless the profile changes first.
                self._seen = (start, job.duration, job.req, free, fit)
                return start
            later = int(times.searchsorted(start, side="right"))
            # Past the last step nothing changes any more: the pooled test was exact there
            # only if nodes can hold the job, which `never_fits` checked before.
            if later == len(times):
                raise AssertionError("a job that fits an empty system must fit once all ends")
            not_before = int(times[later])

    def _pooled_without(self, job: Job, start: int) -> npt.NDArray[np.int64]:
        """The pooled view (a copy) with job i's own reservation over [start, start + d_i)
        given back. Makes start and start + d_i step boundaries (no-ops for a held
        reservation, whose ends already are)."""
        first, stop = self._split(start), self._split(start + job.duration)
        pooled = self._pooled[: self._steps].copy()
        pooled[first:stop] += request_array(job.req) * job.units
        return pooled

    def could_start_before(self, job: Job, start: int) -> bool:
        """Whether the pooled view, with job i's own reservation at `start` given back, lets it
        start earlier: a held reservation can move earlier only then (`earliest` >= this)."""
        if start <= 0:
            return False
        pooled = self._pooled_without(job, start)
        return first_room(self.times, pooled, job.demand(), job.duration) < start

    def starts_now_without(self, job: Job, start: int) -> bool:
        """Whether job i fits over [0, d_i) in the pooled view once its own reservation at
        `start` is given back."""
        return room_now(self.times, self._pooled_without(job, start), job.demand(), job.duration)

    def place(self, job: Job, start: int, first_fit: bool = False) -> list[int]:
        """Nodes of job i's units for a run from `start` (one entry per unit), by the pool's
        rule (best fit or first fit) over what stays free for all of d_i; taken here."""
        seen = self._seen
        if seen is not None and seen[:3] == (start, job.duration, job.req):
            free, fit = seen[3], seen[4]  # `earliest` just read them
        else:
            free, fit = self.free_during(start, start + job.duration), None
        # FreePool.from_array(free, ...).choose(...), ranked on the arrays (no pool built);
        # without an overfull node, the units per node are `units_fitting`'s.
        nodes = choose_from_array(free, self._eligible, self.problem.free_now.scale, job.req,
                                  job.units, first_fit, nonnegative=not self._negative,
                                  per_node_units=None if self._negative else fit)
        if nodes is None:
            raise AssertionError("place called where the job does not fit")
        self.take(job, start, nodes)
        return nodes

    def copy(self) -> NodeProfile:
        """An independent profile with the same contents (the problem shared)."""
        other = NodeProfile.__new__(NodeProfile)
        other.__dict__.update(self.__dict__)
        other.restore(self.checkpoint())
        other._releases = self._releases
        return other

    def checkpoint(self) -> State:
        """The profile's state, for `restore`."""
        n = self._steps
        return (self._times[:n].copy(), self._free[:n].copy(), self._pooled[:n].copy(),
                self._negative)

    def restore(self, state: State) -> None:
        self._seen = None
        self._times, self._free, self._pooled, self._negative = state
        self._steps = len(self._times)

    def fits_at(self, job: Job, start: int) -> bool:
        """Whether rn_i units of job i fit node by node over [start, start + d_i)."""
        free = self.free_during(start, start + job.duration)
        return int(self.units_fitting(free, job).sum()) >= job.units

    def fits_at_without(self, job: Job, start: int,
                        others: list[tuple[int, Job, list[int]]]) -> bool | None:
        """`fits_at(job, start)` once every (s, job k, nodes) of `others`, reservations held in
        the profile, is given back, the profile left as it is; None where some s or s + d_k is
        not a step boundary (giving it back would split a step)."""
        times = self.times
        starts = np.fromiter((s for s, _, _ in others), dtype=np.int64, count=len(others))
        ends = starts + np.fromiter((k.duration for _, k, _ in others), dtype=np.int64,
                                    count=len(others))
        at_start, at_end = times.searchsorted(starts), times.searchsorted(ends)
        if not (np.all(at_start < len(times)) and np.all(at_end < len(times))
                and np.array_equal(times[at_start], starts)
                and np.array_equal(times[at_end], ends)):
            return None
        first, stop = self._steps_of(start, start + job.duration)
        # The least free amounts over the run, read again on the nodes given back to.
        least = self._free[first:stop].min(axis=0)
        given = []
        for (_, other, nodes), low, high in zip(others, at_start.tolist(), at_end.tolist(),
                                                strict=True):
            low, high = max(low, first), min(high, stop)
            if low < high:
                columns, need = self._columns(other, nodes)
                given.append((low, high, columns, need))
        if given:
            touched = np.unique(np.concatenate([columns for _, _, columns, _ in given]))
            window = self._free[first:stop, touched]  # a copy (rows × touched × types)
            for low, high, columns, need in given:
                window[low - first : high - first, touched.searchsorted(columns)] += need
            least[touched] = window.min(axis=0)
        return int(self.units_fitting(least, job).sum()) >= job.units

    def _columns(self, job: Job, nodes: list[int]) -> tuple[Counts, Counts]:
        """The distinct nodes of `nodes` and what job i's units take on each: (nodes, types)."""
        counts = np.bincount(np.asarray(nodes, dtype=np.int64), minlength=self._free.shape[1])
        columns = np.flatnonzero(counts)
        return columns, counts[columns, None] * request_array(job.req)[None, :]

    def _valid(self, job: Job, nodes: list[int]) -> bool:
        """Whether `nodes` names one up node per unit of job i."""
        if len(nodes) != job.units:
            return False
        if not nodes:
            return True
        array = np.asarray(nodes, dtype=np.int64)
        return bool(array.min() >= 0 and array.max() < len(self._eligible)
                    and self._eligible[array].all())

    def fits_on(self, job: Job, start: int, nodes: list[int]) -> bool:
        """Whether job i's units fit on `nodes` (one entry per unit) for a run from `start`."""
        if not self._valid(job, nodes):
            return False
        columns, need = self._columns(job, nodes)
        first, stop = self._steps_of(start, start + job.duration)
        window = self._free[first:stop]
        if self._negative and not bool(np.all(window >= 0)):
            return False  # as before: a node overfull during the run fails the test
        return bool(np.all(window[:, columns].min(axis=0) >= need))

    def take(self, job: Job, start: int, nodes: list[int], sign: int = 1) -> None:
        """Hold job i's units on `nodes` over [start, start + d_i) (`sign` -1: give them back)."""
        self._seen = None
        end = start + job.duration
        first, stop = self._split(start), self._split(end)
        columns, need = self._columns(job, nodes)
        block = self._free[first:stop, columns] - sign * need
        self._free[first:stop, columns] = block
        self._pooled[first:stop] -= sign * need.sum(axis=0)
        if sign > 0 and not self._negative:
            self._negative = bool((block < 0).any())

    def take_all(self, held: list[tuple[int, Job, list[int]]]) -> bool:
        """Take every (start, job i, nodes) of `held` at once if each fits on its nodes after
        the ones before it (`fits_on` then `take`, one by one, would all succeed); otherwise
        change nothing and return False. Every start and end must be a step boundary already
        (`add_boundaries`).

        Amounts only go down, so each fits after the ones before it exactly when no node is
        short at any time once all are taken."""
        if self._negative:
            return False
        if not held:
            return True
        # `_valid` of every reservation at once: one up node per unit.
        units = np.fromiter((len(nodes) for _, _, nodes in held), dtype=np.int64,
                            count=len(held))
        asked = np.fromiter((job.units for _, job, _ in held), dtype=np.int64, count=len(held))
        if not np.array_equal(units, asked):
            return False
        nodes = np.fromiter(chain.from_iterable(ns for _, _, ns in held), dtype=np.int64,
                            count=int(units.sum()))
        if len(nodes) and not (nodes.min() >= 0 and nodes.max() < len(self._eligible)
                               and self._eligible[nodes].all()):
            return False
        times = self.times
        starts = np.fromiter((s for s, _, _ in held), dtype=np.int64, count=len(held))
        ends = starts + np.fromiter((j.duration for _, j, _ in held), dtype=np.int64,
                                    count=len(held))
        first, stop = times.searchsorted(starts), times.searchsorted(ends)
        if not (np.array_equal(times[first], starts)
                and np.array_equal(times[np.minimum(stop, len(times) - 1)], ends)):
            raise AssertionError("take_all needs every start and end as a step boundary")
        owner = np.repeat(np.arange(len(held)), units)  # reservation of each unit
        req = np.stack([request_array(job.req) for _, job, _ in held])[owner]
        # Units taken per step: + from its start's step, - from its end's step, summed up.
        change = np.zeros((len(times) + 1, *self._free.shape[1:]), dtype=np.int64)
        np.add.at(change, (first[owner], nodes), req)
        np.subtract.at(change, (stop[owner], nodes), req)
        taken = np.cumsum(change[:-1], axis=0)
        left = self.free - taken
        if bool((left < 0).any()):
            return False
        self._seen = None
        self._free[: self._steps] = left
        self._pooled[: self._steps] -= taken.sum(axis=1)
        return True

    def give_back(self, job: Job, start: int, nodes: list[int]) -> None:
        """Undo `take(job, start, nodes)`."""
        self.take(job, start, nodes, sign=-1)
