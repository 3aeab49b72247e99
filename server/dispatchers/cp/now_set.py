"""Which jobs without a promise start now, around every promise: capacity first, then slowdown.

The candidates are the queued jobs that hold no promise and fit now, each on its own, for all of
d_i around the running work and every promise (the promise book's profile). Started together
they must still fit: for each step k of the profile (from τ_k, relative to t) and resource type
r, the jobs still running then take no more than the pooled free amount,

    Σ_{i : d_i > τ_k} x_i · rn_i · req[i][r] <= free_k[r]          (x_i = 1: i starts now)

and among such sets the model takes the one with the most processors n_i started now, then the
largest Σ of the papers' priority, the current slowdown (t - q_i + d_i) / d_i (lexicographic:
the processors' weight exceeds the whole priority term). The search branches on the x_i in
that order, larger value first, so its first solution is the greedy packing; the δ / 2δ / δmax
restart policy improves on it. The pooled view ignores how units split over nodes, so the
chosen jobs are then placed node by node (`promise_decision`), and the ones that no longer fit
wait.
The variables are one per candidate, independent of the node count.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from ortools.sat.python import cp_model

from ...domain.outcome_kinds import SolveStatus
from ..base import AttemptRecord, SearchControl
from ..planning.job_orders import processors
from ..planning.node_profile import NodeProfile
from ..planning.problem import Job, Problem
from .cpsat_attempt import SolutionValues, model_size, set_hints, solve_attempt
from .restart_policy import AttemptResult, run_restart_policy

PRIORITY_SCALE = 1000  # the priority term in integer thousandths of a slowdown


@dataclass(slots=True)
class NowSet:
    """The chosen candidates (in the order to place them) and how the search went."""

    chosen: list[Job]
    status: SolveStatus = SolveStatus.HEURISTIC
    attempts: list[AttemptRecord] = field(default_factory=list)
    variables: int = 0
    constraints: int = 0
    solve_seconds: float = 0.0


def _priority(job: Job, t: int) -> int:
    return round(PRIORITY_SCALE * job.slowdown_at(t))


def packing_order(problem: Problem, candidates: list[Job]) -> list[Job]:
    """Most processors first, then highest current slowdown, then submit order."""
    t = problem.t
    return sorted(candidates,
                  key=lambda j: (-processors(problem, j), -_priority(j, t), j.submit, j.index))


def _pooled_steps(profile: NodeProfile, longest: int) -> tuple[np.ndarray, np.ndarray]:
    """The profile's step starts before `longest` and the pooled free amounts of each."""
    times = profile.times
    used = int(times.searchsorted(longest, side="left"))
    return times[:used], profile.free[:used].sum(axis=1)


def greedy_now(problem: Problem, profile: NodeProfile, order: list[Job]) -> list[Job]:
    """The candidates of `order` that fit the pooled view together, taken in that order."""
    times, free = _pooled_steps(profile, max(j.duration for j in order))
    free = free.copy()
    chosen = []
    for job in order:
        during = times < job.duration
        demand = np.asarray(job.demand(), dtype=np.int64)
        if np.all(free[during] >= demand):
            free[during] -= demand
            chosen.append(job)
    return chosen


def choose_now_set(
    problem: Problem, profile: NodeProfile, candidates: list[Job], control: SearchControl,
) -> NowSet:
    """The set of `candidates` to start now: the greedy packing, improved by the model under
    the restart policy when the greedy packing does not start them all."""
    order = packing_order(problem, candidates)
    greedy = greedy_now(problem, profile, order)
    if len(greedy) == len(order):  # every candidate starts: nothing to choose
        return NowSet(greedy, SolveStatus.OPTIMAL)
    t = problem.t
    times, free = _pooled_steps(profile, max(j.duration for j in order))
    model = cp_model.CpModel()
    x = [model.new_bool_var(f"now_{j.index}") for j in order]
    # Capacity: the jobs still running at each step take no more than the pooled free amount.
    demands = np.asarray([j.demand() for j in order], dtype=np.int64)
    durations = np.asarray([j.duration for j in order], dtype=np.int64)
    for k, start in enumerate(times.tolist()):
        running = np.flatnonzero(durations > start)
        for r in range(demands.shape[1]):
            need = demands[running, r]
            if int(need.sum()) <= int(free[k, r]):
                continue  # all of them together fit: no constraint
            model.add(sum(int(need[n]) * x[i] for n, i in enumerate(running.tolist()))
                      <= int(free[k, r]))
    # Capacity first, then the papers' priority: lexicographic through the weights.
    priority = [_priority(j, t) for j in order]
    width = sum(priority) + 1
    score = [processors(problem, j) * width + p for j, p in zip(order, priority, strict=True)]
    model.maximize(sum(s * v for s, v in zip(score, x, strict=True)))
    model.add_decision_strategy(x, cp_model.CHOOSE_FIRST, cp_model.SELECT_MAX_VALUE)
    chosen_greedy = {j.index for j in greedy}
    set_hints(model, [(v, int(j.index in chosen_greedy)) for v, j in zip(x, order, strict=True)])
    variables, constraints = model_size(model)

    def extract(values: SolutionValues) -> tuple[tuple[int, ...], float]:
        picked = tuple(k for k, v in enumerate(x) if values.value(v))
        return picked, -float(sum(score[k] for k in picked))

    deterministic = control.settings.deterministic
    stall = control.settings.stall_ms / 1000 if control.settings.stall_ms else None

    def attempt(limit: float, best: tuple[int, ...] | None) -> AttemptResult[tuple[int, ...]]:
        # Deterministic: `limit` is deterministic time and only the deadline caps the wall.
        stop_at = control.deadline if deterministic else time.monotonic() + limit
        hint = None if best is None else [(v, int(k in best)) for k, v in enumerate(x)]
        return solve_attempt(model, stop_at, hint, extract, control.workers, stall,
                             control.cancelled,
                             deterministic_limit=limit if deterministic else None)

    policy = run_restart_policy(attempt, control.settings, control.deadline, control.cancelled)
    result = NowSet(greedy, SolveStatus.HEURISTIC, policy.attempts, variables, constraints,
                    policy.solve_seconds)
    greedy_score = sum(score[k] for k, j in enumerate(order) if j.index in chosen_greedy)
    if policy.best is not None and policy.objective is not None \
            and -policy.objective > greedy_score:
        result.chosen = [order[k] for k in policy.best]
        result.status = policy.status
    return result
