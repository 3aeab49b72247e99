"""When a baseline's reservation may be shown as a promise: EASY's head, LOS's, EASY-k's first,
conservative's reservations (`Outcome.expected_starts[i] = (s_i - t, True)`).

These dispatchers plan with the predicted durations d_i. A reservation planned on them is a
guarantee only when no job of the plan can outrun its d_i, that is when every d_i is the job's
requested time (`Job.at_most`, the limit at which the workload manager kills it) and every
running row ends at its requested time (predictor `walltime`): then EASY's head and
conservative's reservations never get later (Mu'alem & Feitelson 2001), and the reservation is
reported as a promise. Under any other predictor a job may run past its d_i up to its limit and
push the reservation back, so the reservation is reported as what it is, the likely start of the
current plan (an estimate). The promise book (profile `book`) is what promises starts at the
limits whatever the predictor (`cp/promise_steps.py`).

The rule reads the predictor too (`Problem.limits_predictor`, set by the pipeline): only under
`walltime` is every decision planned at the limits. Under a learning predictor a decision whose
every duration happens to be the requested time (users without a history yet) used to report
its reservations as promises, which a later decision planned on predictions could backfill past
(issue #49's 21-pair frontier at c427d0e: EASY's few such promises under data-driven and
last-two kept on 0-75 % of the pairs' runs); those are estimates now.

A site's priorities: EASY's and LOS's head in priority order is promised as in submit order.
A job that arrives later with a higher priority would take the head's place and the old
head's reservation would get later (measured on the atlas-priority preset under walltime: 5 of
EASY's 76 head promises late, by up to 23.5 h, benchmarks/results/qos/priority-cost.md). No
rule of one snapshot closes that (promising only when the queue carries one priority left all
5 late), so the promise is held across decisions: the job that holds one (`Job.promised`,
kept by the session or sent back) stays the head until it starts (`easy.promise_holder_first`).
Measured on the same run: 67 of 67 head promises kept.

Deciding costs nothing more: the decision is the dispatcher's own, unchanged.
"""

from __future__ import annotations

import numpy as np

from .problem import Problem


def planned_at_the_limits(problem: Problem) -> bool:
    """Whether every d_i of `problem` is its job's requested time and every running row ends at
    its requested time: a plan on it holds whatever the jobs do (the limits are enforced)."""
    if not problem.limits_predictor or any(job.duration != job.at_most for job in problem.jobs):
        return False
    running = problem.running
    return bool(np.array_equal(running.ends, running.limit_ends))


def promises_only_at_the_limits(problem: Problem, expected_starts: dict[int, tuple[int, bool]],
                                ) -> None:
    """`expected_starts` (an Outcome's) with its promises kept as promises only where the plan
    was made at the limits (`planned_at_the_limits`), else reported as estimates."""
    if not any(promised for _, promised in expected_starts.values()):
        return
    if planned_at_the_limits(problem):
        return
    for i, (start, promised) in expected_starts.items():
        if promised:
            expected_starts[i] = (start, False)
