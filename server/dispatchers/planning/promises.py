"""Promises: the start s_i a waiting job was told, kept from one decision to the next and only
ever moved earlier while the expected durations d_i hold.

A promise is kept as its start (relative to t here) and the nodes its units are planned on then:
the nodes are the plan's, not part of the promise, and keep the promises' feasibility checkable
from one decision to the next. At each decision (`keep_promises`), on the profile of the running
work (`NodeProfile`):

1. the held promises are placed in order of their start s_i: on their own nodes if they still
   fit there, else at the same s_i on other nodes, else — a running job outlived its expected
   end, a node went down, d_i grew — at the earliest start that fits after the promises placed
   before it, so that a promise moves by the least possible given the older ones, and the move
   is reported (`PromisePlan.moved`); a promise already due (s_i <= t) is placed at t;
2. they are compressed in order of their start: each is taken out and put back at its earliest
   start, which is never later (its own room is free again), so a promise only moves earlier;
3. the jobs that get a promise at this decision (`newcomers`, in submit order) get the earliest
   start around all of them.

A promise at 0 is due: its job starts now. No other job is placed here: what starts now beside
the due ones is chosen around the profile this leaves (every promise held in it).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .node_profile import NodeProfile
from .problem import Job, Problem
from .stopping import StopCheck, Stopped, never, stop_if


@dataclass(slots=True)
class PromisePlan:
    """Every promise after a decision at t: job index -> (s_i - t, node of each unit)."""

    profile: NodeProfile  # the running work and every promise below, taken
    starts: dict[int, tuple[int, list[int]]] = field(default_factory=dict)
    # Held promises that had to move later (job index -> seconds later than promised).
    moved: dict[int, int] = field(default_factory=dict)

    def due(self) -> dict[int, list[int]]:
        """The jobs whose promise is now: they start now, on these nodes."""
        return {i: nodes for i, (s, nodes) in self.starts.items() if s == 0}


def keep_promises(
    problem: Problem,
    held: Mapping[int, tuple[int, list[int]]],
    newcomers: Iterable[Job],
    first_fit: bool = False,
    should_stop: StopCheck = never,
) -> PromisePlan:
    """Place the `held` promises (job index -> (s_i - t, possibly <= 0, nodes)), compress them,
    and promise each of `newcomers` (jobs without one, in the order given) the earliest start
    around them. Raises Stopped when `should_stop()` turns true before the held promises are
    placed; once they are, a stop leaves the rest where they were, or without a promise."""
    plan = PromisePlan(NodeProfile(problem))
    jobs = problem.jobs
    order = sorted(held, key=lambda i: (held[i][0], jobs[i].submit, i))
    _place_held(plan, [(max(held[i][0], 0), jobs[i], held[i][1]) for i in order], first_fit,
                should_stop)
    try:
        _compress(plan, first_fit, should_stop)
        for job in newcomers:
            stop_if(should_stop, "new promises")
            start = plan.profile.earliest(job, should_stop)
            plan.starts[job.index] = (start, plan.profile.place(job, start, first_fit))
    except Stopped:
        pass  # the promises placed so far stand; the rest wait for the next decision
    return plan


def _place_held(
    plan: PromisePlan, held: list[tuple[int, Job, list[int]]], first_fit: bool,
    should_stop: StopCheck,
) -> None:
    """Step 1: every held promise in order of its start, at it if it still fits (on its nodes,
    else on others), else at the earliest start after those before it."""
    profile = plan.profile
    profile.add_boundaries(b for start, job, _ in held for b in (start, start + job.duration))
    if profile.take_all(held):  # the usual case: every promise still fits where it was
        plan.starts.update((job.index, (start, nodes)) for start, job, nodes in held)
        return
    for start, job, nodes in held:
        stop_if(should_stop, "promises")
        if profile.fits_on(job, start, nodes):
            profile.take(job, start, nodes)
        elif profile.fits_at(job, start):
            nodes = profile.place(job, start, first_fit)
        else:
            later = profile.earliest(job, should_stop)
            nodes = profile.place(job, later, first_fit)
            if later > start:
                plan.moved[job.index] = later - start
            start = later
        plan.starts[job.index] = (start, nodes)


def _compress(plan: PromisePlan, first_fit: bool, should_stop: StopCheck) -> None:
    """Step 2: each promise, in order of its start, moved to its earliest start if earlier."""
    profile, jobs = plan.profile, plan.profile.problem.jobs
    for i in sorted(plan.starts, key=lambda i: (plan.starts[i][0], jobs[i].submit, i)):
        start, nodes = plan.starts[i]
        job = jobs[i]
        stop_if(should_stop, "promise compression")
        if start == 0 or not profile.could_start_before(job, start):  # not even pooled
            continue
        profile.give_back(job, start, nodes)
        try:
            earlier = profile.earliest(job, should_stop)
        except Stopped:
            profile.take(job, start, nodes)  # stopped: it keeps its promise as it was
            raise
        if earlier < start:
            plan.starts[i] = (earlier, profile.place(job, earlier, first_fit))
        else:  # no gain (never later: its own room is free): it keeps its nodes
            profile.take(job, start, nodes)
