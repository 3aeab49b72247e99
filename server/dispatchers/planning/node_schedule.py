"""A node-level list schedule: the complete incumbent of PCP'19's node-level model.

Each job, highest priority first, gets the earliest step start at which enough of its candidate
nodes (those a unit fits on now, as in the model) hold its units for all of [s_i, s_i + d_i),
given the running work and the jobs placed before it. Running work is released at the pooled
view's coarsened ends (never earlier than predicted), so the schedule satisfies both PCP'19's
per-node cumulatives and its redundant pooled one. Fixed node blocks (every promise's units
under the promise book) are held over their own steps.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from .plan import Plan
from .problem import Job, Problem
from .protected_room import NodeBlock
from .stopping import StopCheck, never, stop_if

IntArray = npt.NDArray[np.int64]


def node_list_schedule(
    problem: Problem,
    jobs: list[Job],
    candidates: dict[int, list[int]],
    should_stop: StopCheck = never,
    fixed: list[NodeBlock] | None = None,
) -> Plan:
    """Start offsets and units per node of every job, and the unit nodes of those at t, with
    the `fixed` blocks (node, start, end, amounts) held.

    Raises Stopped when `should_stop()` turns true (checked once per job).
    """
    stop_if(should_stop, "node-level list schedule")
    # Only the nodes some job may use get a column: steps × columns × resource types.
    columns = sorted({n for nodes in candidates.values() for n in nodes})
    column_of = {n: c for c, n in enumerate(columns)}
    times, free = _free_over_steps(problem, columns, column_of)
    for n, start, end, amounts in fixed or ():
        c = column_of.get(n)
        if c is not None:
            times, free = _split(times, free, start)
            times, free = _split(times, free, end)
            first, stop = np.searchsorted(times, (start, end), side="left").tolist()
            free[first:stop, c] -= np.asarray(amounts, dtype=np.int64)
    plan = Plan({})
    for job in jobs:
        stop_if(should_stop, "node-level list schedule")
        nodes = np.asarray([column_of[n] for n in candidates[job.index]], dtype=np.int64)
        used = [r for r, q in enumerate(job.req) if q > 0]
        # units[k, c]: units of the job that candidate c holds during step k
        units = np.maximum(np.min(
            np.stack([free[:, nodes, r] // job.req[r] for r in used]), axis=0
        ), 0)
        for i in range(len(times)):
            start = int(times[i])
            stop = int(np.searchsorted(times, start + job.duration, side="left"))
            window = units[i:stop].min(axis=0) if stop > i else units[i]
            if int(window.sum()) < job.units:
                continue
            take = _best_fit(nodes, free[i, nodes], window, job.units)
            times, free = _split(times, free, start + job.duration)
            stop = int(np.searchsorted(times, start + job.duration, side="left"))
            for c, k in take.items():
                free[i:stop, c] -= k * np.asarray(job.req, dtype=np.int64)
            plan.start_offsets[job.index] = start
            plan.unit_counts[job.index] = {columns[c]: k for c, k in take.items()}
            if start == 0:
                plan.unit_nodes[job.index] = [
                    n for n, k in plan.unit_counts[job.index].items() for _ in range(k)
                ]
            break
        else:  # pragma: no cover - the last step holds every candidate's full capacity
            raise AssertionError(f"job {job.id} fits no step of the node-level schedule")
    return plan


def _free_over_steps(problem: Problem, columns: list[int], column_of: dict[int, int]
                     ) -> tuple[IntArray, IntArray]:
    """The steps (the pooled releases' times from t) and the free amounts of the `columns`'
    nodes during each: steps × columns × resource types."""
    ends = np.asarray([end for end, _ in problem.pooled_releases()], dtype=np.int64)
    times: IntArray = np.concatenate(([0], ends[ends > 0])).astype(np.int64)
    released = np.zeros((len(times), len(columns), len(problem.resources)), dtype=np.int64)
    for block in problem.blocks:
        c = column_of.get(block.node)
        if c is not None:
            step = int(np.searchsorted(times, block.end, side="left"))
            released[min(step, len(times) - 1), c] += block.amounts
    free_now = np.asarray(problem.free_now.free, dtype=np.int64)[columns]
    free: IntArray = free_now[None] + np.cumsum(released, axis=0)
    return times, free


def _best_fit(nodes: IntArray, free_then: IntArray, window: IntArray, units: int
              ) -> dict[int, int]:
    """rn_i units on the candidate columns `nodes`: fullest nodes first (best fit), each with
    as many units as it holds over the run (`window`); {column: units}."""
    order = np.lexsort((nodes, free_then.sum(axis=1)))
    take: dict[int, int] = {}
    need = units
    for c in order:
        if need == 0:
            break
        k = min(int(window[c]), need)
        if k:
            take[int(nodes[c])] = k  # a column for now; mapped back by the caller
            need -= k
    return take


def _split(times: IntArray, free: IntArray, when: int) -> tuple[IntArray, IntArray]:
    """Make `when` a step boundary (the new step copies the one it splits)."""
    k = int(np.searchsorted(times, when, side="left"))
    if k < len(times) and times[k] == when:
        return times, free
    return np.insert(times, k, when), np.insert(free, k, free[k - 1], axis=0)
