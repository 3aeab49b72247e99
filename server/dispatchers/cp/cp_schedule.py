"""The CP scheduling model common to HCP'19, PCP'19 and PCP'20 (CP-SAT).

Times are relative to t. For each queued job i in the model: a start s_i in [0, H - d_i], an
interval [s_i, s_i + d_i), and a literal now_i <=> s_i = 0; a job not started at t starts no
earlier than the first end after t (`later_start_bounds`). Objective (CP 2019 version 3):
minimise Σ w_i (s_i - q_i + d_i) / d_i, i.e. Σ w_i s_i / d_i plus a constant, with integer
weights round(W w_i / d_i). Search: starts in priority order, earliest value first (the papers'
search).

Priority (issue #50; docs/dispatchers.md, "Priority in the CP models"): w_i weighs job i's
slowdown by the workload manager's priority p_i. Among the L + 1 distinct priorities of the
window's jobs, ranked 0 (lowest) to L (highest), job i of rank r_i has w_i = 1 + r_i / L, so
1 <= w_i <= 2: the highest-priority job's slowdown counts twice the lowest's, a job of higher
priority starts first among jobs of equal d_i, and a much shorter job may still pass it (the
papers' slowdown stays the measure). With every p_i equal (L = 0) every w_i = 1: the papers'
objective, the same integer weights and the same decisions as without priorities.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model

from ...domain.occupancy import MAX_MODEL_DURATION
from ..planning.problem import Job, Problem, later_start_bounds
from ..planning.protected_room import PooledBlock
from .cpsat_attempt import SolutionValues

# Weight scale: the integer weight of s_i is round(WEIGHT_SCALE × w_i / d_i), at least 1.
WEIGHT_SCALE = 1_000_000


def priority_weights(jobs: Sequence[Job]) -> dict[int, float]:
    """w_i = 1 + r_i / L by job index: r_i the rank of p_i among the L + 1 distinct
    priorities of `jobs` (0: the lowest); 1 for every job when all p_i are equal."""
    levels = sorted({j.priority for j in jobs})
    if len(levels) < 2:
        return {j.index: 1.0 for j in jobs}
    rank = {p: r for r, p in enumerate(levels)}
    top = len(levels) - 1
    return {j.index: 1.0 + rank[j.priority] / top for j in jobs}


def weighted_slowdown(problem: Problem, jobs: Sequence[Job], start_offsets: dict[int, int]
                      ) -> float:
    """Σ w_i (s_i - q_i + d_i) / d_i with s_i = t + start offset: the model's objective (up to
    rounding), and the papers' total slowdown when every p_i is equal."""
    weights = priority_weights(jobs)
    return sum(
        weights[j.index] * ((problem.t + start_offsets[j.index] - j.submit + j.duration)
                            / j.duration)
        for j in jobs
    )


@dataclass(slots=True)
class ScheduleModel:
    model: cp_model.CpModel
    jobs: list[Job]  # priority order
    start_vars: list[cp_model.IntVar]  # s_i - t
    intervals: list[cp_model.IntervalVar]
    now_literals: list[cp_model.IntVar]  # now_i <=> s_i = t
    horizon: int

    def start_hints(self, start_offsets: dict[int, int]) -> list[tuple[cp_model.IntVar, int]]:
        """Hints for every s_i and now_i from a plan's start offsets (job index -> s_i - t)."""
        hints: list[tuple[cp_model.IntVar, int]] = []
        for job, s, now in zip(self.jobs, self.start_vars, self.now_literals, strict=True):
            offset = start_offsets[job.index]
            hints += [(s, offset), (now, int(offset == 0))]
        return hints

    def start_offsets_of(self, values: SolutionValues) -> dict[int, int]:
        """The solver's s_i - t of every job (job index -> start offset)."""
        return {
            j.index: values.value(s) for j, s in zip(self.jobs, self.start_vars, strict=True)
        }


def horizon(problem: Problem, jobs: list[Job], fixed: list[PooledBlock] | None = None) -> int:
    """eoh - t: the last end of fixed work (and of the site's unavailability windows, cut at
    MAX_MODEL_DURATION) plus Σ d_i bounds any list schedule of the jobs, one that starts them
    after every window included."""
    ends = problem.running.ends
    running_end = [int(ends.max())] if len(ends) else []
    rules = problem.eligibility
    windows_end = [min(w.end, MAX_MODEL_DURATION) for w in rules.windows] if rules else []
    last_end = max(running_end + windows_end
                   + [start + length for start, length, _ in fixed or ()], default=0)
    return last_end + sum(j.duration for j in jobs) + 1


def build_schedule_model(
    problem: Problem,
    jobs: list[Job],
    pooled: bool,
    fixed: list[PooledBlock] | None = None,
) -> ScheduleModel:
    """Start variables, intervals, objective; with `pooled`, one cumulative per resource type
    over Tcap_r = Σ_n cap[n][r] (up nodes) holding the queued jobs and the `fixed` blocks
    (start, duration, pooled amounts): the running work, and what a protected room holds (a
    head's reservation, the promises: `ProtectedRoom.pooled_fixed`); None: the running work
    alone."""
    model = cp_model.CpModel()
    h = horizon(problem, jobs, fixed)
    start_vars, intervals, now_literals = [], [], []
    later = later_start_bounds(problem, jobs)
    for j in jobs:
        s = model.new_int_var(0, h - j.duration, f"s_{j.index}")
        start_vars.append(s)
        intervals.append(model.new_fixed_size_interval_var(s, j.duration, f"job_{j.index}"))
        now = model.new_bool_var(f"now_{j.index}")
        model.add(s == 0).only_enforce_if(now)
        # Not at t: not before the first end (running work, or another job started at t).
        model.add(s >= later[j.index]).only_enforce_if(~now)
        now_literals.append(now)
    if pooled:
        add_pooled_cumulatives(model, problem, jobs, intervals, fixed)
    weights = priority_weights(jobs)
    model.minimize(
        sum(
            max(1, round(WEIGHT_SCALE * weights[j.index] / j.duration)) * s
            for j, s in zip(jobs, start_vars, strict=True)
        )
    )
    # The papers' search: highest-priority job first, earliest start first.
    model.add_decision_strategy(start_vars, cp_model.CHOOSE_FIRST, cp_model.SELECT_MIN_VALUE)
    return ScheduleModel(model, jobs, start_vars, intervals, now_literals, h)


def add_pooled_cumulatives(
    model: cp_model.CpModel,
    problem: Problem,
    jobs: list[Job],
    intervals: list[cp_model.IntervalVar],
    fixed: list[PooledBlock] | None = None,
) -> None:
    """cumulative([s_i], [d_i], [rn_i × req_i,r], Tcap_r) for each resource type any job uses,
    with the `fixed` blocks (default: running work from t to its coarsened end)."""
    if fixed is None:
        fixed = [(0, end, amounts) for end, amounts in problem.pooled_releases()]
    running = [
        model.new_fixed_size_interval_var(start, length, f"fixed_{k}")
        for k, (start, length, _) in enumerate(fixed)
    ]
    for r in range(len(problem.resources)):
        if not any(j.req[r] for j in jobs):
            continue  # no constraint for a resource type no job in the model uses
        demands = [j.units * j.req[r] for j in jobs]
        held = [(iv, amounts[r]) for iv, (_, _, amounts) in zip(running, fixed, strict=True)]
        held = [(iv, a) for iv, a in held if a > 0]
        model.add_cumulative(
            [iv for iv, _ in held] + intervals,
            [a for _, a in held] + demands,
            problem.up_capacity[r],
        )
