"""Promises at the requested times: what a dispatcher that reports a reservation as a promise
(`Outcome.expected_starts[i] = (s_i - t, True)`: EASY's head, LOS's, EASY-k's first,
conservative's reservations) tells a user is a start no prediction can make late.

The dispatcher decides with its predicted durations d_i, as before; its planned start of each
promised job becomes the likely start beside the promise (`Outcome.likely_starts`), and the
promise is the earliest start of that job, node by node, on the problem at its limits
(`problem.at_limits`: running work to its requested time), with every job started now there
for its requested time and every earlier promise at its own promise for its job's requested
time; never earlier than the likely start.
"""

from __future__ import annotations

from collections.abc import Mapping

from .node_profile import NodeProfile
from .problem import Problem, at_limits
from .stopping import StopCheck, Stopped, never, stop_if


def promise_at_the_limits(
    problem: Problem, placements: Mapping[int, list[int]],
    expected_starts: dict[int, tuple[int, bool]], likely_starts: dict[int, int],
    should_stop: StopCheck = never,
) -> None:
    """Each promise of `expected_starts` (an Outcome's, beside its `placements`) moved to the
    requested times' start, its planned start put in `likely_starts`. Stopped meanwhile, the
    promises not yet computed are reported as estimates (not promised), their starts as
    planned."""
    promised = sorted((start, i) for i, (start, is_promise) in expected_starts.items()
                      if is_promise and start > 0)
    if not promised:
        return
    limits = at_limits(problem)
    jobs = limits.job_by_index()
    done: set[int] = set()
    try:
        stop_if(should_stop, "promises at the limits")
        profile = NodeProfile(limits)
        for i, nodes in placements.items():
            profile.take(jobs[i], 0, nodes)
        for likely, i in promised:
            job = jobs[i]
            start = profile.earliest(job, should_stop, not_before=likely)
            profile.place(job, start)
            expected_starts[i] = (start, True)
            likely_starts[i] = likely
            done.add(i)
    except Stopped:
        for _, i in promised:
            if i not in done:
                expected_starts[i] = (expected_starts[i][0], False)
