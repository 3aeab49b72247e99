"""Queue orders of the backfilling baselines: which queued job comes first.

Each order sorts the queue by the workload manager's priority p_i first (higher first; a
site's rules, issue #50), then by a score within equal priority, ties broken by submit time
q_i, then queue position. Without priorities (every p_i equal) the order is the score's alone.
Symbols, for queued job i at dispatching time t:

- d_i: predicted duration, seconds (the requested time under the `walltime` predictor);
- w_i = t - q_i: time waited so far, seconds;
- n_i: processors, rn_i x cores per unit (rn_i when the jobs ask for no "core");
- q_i: submit time, seconds on the caller's clock.

The orders are those RLScheduler (Zhang et al., SC'20) compares with:

- FCFS: smallest q_i first; `by_priority`: the workload manager's priority first (higher
  first), then FCFS (the queue order of FCFS, EASY, EASY-SJBF, EASY-LXF, LOS and EASY-k).
- SJF: smallest d_i first (shortest job first).
- WFP3: largest (w_i / d_i)^3 x n_i first (Tang et al. 2009): waiting long relative to its
  length, weighted by width, pushes a job forward.
- UNICEF: largest w_i / (log2(n_i) x d_i) first (Tang et al. 2009). For n_i = 1, log2(n_i) is
  0; as in RLScheduler's evaluation, n_i and w_i are taken plus ε = 1e-15, which puts
  single-processor jobs ahead of every wider one that has waited less than about
  0.7 x log2(n_i) seconds per second of d_i.
- F1: smallest log10(d_i) x n_i + 870 x log10(q_i) first (Carastan-Santos & de Camargo 2017,
  a function fitted by simulation); d_i and q_i of 0 count as 0.1. The constant was fitted on
  trace-relative submit times, so on Unix times the q_i term changes little between jobs and
  the order is close to smallest log10(d_i) x n_i first.

Two more scores order only the backfill candidates behind EASY's head (`easy_sjbf`, `easy_lxf`),
within equal priority too:

- SJBF: smallest d_i first (Tsafrir, Etsion & Feitelson 2007: shortest-job backfilled first).
- LXF: largest expansion factor (w_i + d_i) / d_i first (Maui / Moab's XFactor).

RLScheduler's evaluation script computes WFP3's and UNICEF's w_i from a start time that is
still unset while the job waits (so w_i = -1 - q_i there); its published WFP3 and UNICEF
figures are of that variant, not of the formulas above, which these orders implement.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from .problem import Job, Problem

JobOrder = Callable[[Problem], list[Job]]

CORE = "core"
EPSILON = 1e-15  # UNICEF's guard against log2(1) = 0, as in RLScheduler's evaluation
F1_SUBMIT_WEIGHT = 870.0


def processors(problem: Problem, job: Job) -> int:
    """n_i: rn_i x cores per unit, or rn_i when the jobs ask for no cores."""
    if CORE in problem.resources:
        per_unit = job.req[problem.resources.index(CORE)]
        if per_unit > 0:
            return job.units * per_unit
    return job.units


JobScore = Callable[[Job], float]


def _sorted(problem: Problem, score: JobScore) -> list[Job]:
    return in_priority_by(problem.jobs, score)


def in_priority_by(jobs: list[Job], score: JobScore) -> list[Job]:
    """`jobs` in priority order (p_i, higher first), by `score` within equal priority, ties
    broken by q_i, then queue position: `sort_by` when every p_i is equal."""
    return sorted(jobs, key=lambda j: (-j.priority, score(j), j.submit, j.index))


def sort_by(jobs: list[Job], score: JobScore) -> list[Job]:
    """`jobs` by `score` alone, ties broken by q_i, then queue position (the CP path's extra
    list schedules, `list_orders`, which do not read priorities)."""
    return sorted(jobs, key=lambda j: (score(j), j.submit, j.index))


def sjf_score(problem: Problem) -> JobScore:
    return lambda job: job.duration


def wfp3_score(problem: Problem) -> JobScore:
    def score(job: Job) -> float:
        wait = problem.t - job.submit
        return -((wait / job.duration) ** 3) * processors(problem, job)

    return score


def unicef_score(problem: Problem) -> JobScore:
    def score(job: Job) -> float:
        wait = problem.t - job.submit
        n = processors(problem, job)
        return -(wait + EPSILON) / (math.log2(n + EPSILON) * job.duration)

    return score


def f1_score(problem: Problem) -> JobScore:
    def score(job: Job) -> float:
        d = job.duration if job.duration > 0 else 0.1
        q = job.submit if job.submit > 0 else 0.1
        return math.log10(d) * processors(problem, job) + F1_SUBMIT_WEIGHT * math.log10(q)

    return score


def xfactor_score(problem: Problem) -> JobScore:
    """Largest expansion factor (w_i + d_i) / d_i first."""
    return lambda job: -(problem.t - job.submit + job.duration) / job.duration


def fcfs(problem: Problem) -> list[Job]:
    return sorted(problem.jobs, key=lambda j: (j.submit, j.index))


def by_priority(problem: Problem) -> list[Job]:
    """The workload manager's priority first (higher first), then FCFS within equal priority:
    `fcfs` itself when every job has the same priority (no priorities given)."""
    return sorted(problem.jobs, key=lambda j: (-j.priority, j.submit, j.index))


def sjf(problem: Problem) -> list[Job]:
    return _sorted(problem, sjf_score(problem))


def wfp3(problem: Problem) -> list[Job]:
    return _sorted(problem, wfp3_score(problem))


def unicef(problem: Problem) -> list[Job]:
    return _sorted(problem, unicef_score(problem))


def f1(problem: Problem) -> list[Job]:
    return _sorted(problem, f1_score(problem))
