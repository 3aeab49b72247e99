"""A plugin's dispatcher behind a guard, so that no plugin can take a decision, or the server,
down with it.

A dispatcher registered by another package than hpcdispatch (a plugin, docs/plugins.md) is
made behind `Guarded`:

- it decides on its own copy of the problem (`own_copy`), which shares nothing it could
  change with the problem: whatever it changes there, in place or not, the fallback, the
  check and a session's kept state read the problem as the snapshot made it;
- it decides in a thread of its own, recorded as a plugin call (`domain/plugin_calls.py`: a
  plugin that ends the process is named in the log first), and the decision waits for it
  until the search control's deadline or until the caller is gone. Past the deadline the
  decision goes on without it (`RanPastDeadline`); while such an overrun still runs, the
  plugin is not started again (`StillRunning`), so a plugin stuck in a loop holds one thread,
  not one per call;
- what it returns is checked for shape before anything reads it (`outcome_problem`: an
  Outcome, placements of the problem's jobs on its nodes, the domain's statuses and skip
  reasons, `domain.outcome_kinds`; `MalformedOutcome` otherwise). Whether the decision is
  *valid* (capacity, units, nodes that are up) is the independent check's, in the pipeline, as
  for every built-in.

Each failure carries the name of the plugin and `fallback_code`, the reason label the pipeline
answers the fallback under; one that raises in `decide` is re-raised as it is (the pipeline's
dispatcher error). The built-ins are not guarded: they honour the control themselves (their
tests check it), and their decisions stay what they were.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from numbers import Integral, Real
from typing import Any

from ..domain.occupancy import RunningTable
from ..domain.outcome_kinds import SkipReason, SolveStatus
from ..domain.plugin_calls import PluginRun, watch_process_exits
from .base import AttemptRecord, Outcome, SearchControl
from .planning.problem import Job, Problem

# What an outcome may say: the domain's values (a plain int equal to one reads as it).
_STATUSES = frozenset(SolveStatus)
_SKIP_REASONS = frozenset(SkipReason)


class PluginFailure(Exception):
    """A plugin's dispatcher failed in a way the guard saw; `fallback_code` labels it."""

    fallback_code = "plugin_failed"

    def __init__(self, name: str, detail: str) -> None:
        super().__init__(detail)
        self.name = name
        self.detail = detail


class PluginUnavailable(PluginFailure):
    """The registered code could not be loaded (import error, not a dispatcher)."""

    fallback_code = "load_failed"


class RanPastDeadline(PluginFailure):
    """The plugin had not answered by the decision's deadline."""

    fallback_code = "deadline_passed"


class StillRunning(RanPastDeadline):
    """An earlier decision of the plugin ran past its deadline and still runs."""


class MalformedOutcome(PluginFailure):
    """The plugin returned something the pipeline cannot read as an Outcome."""

    fallback_code = "malformed_outcome"


class Guarded:
    """`inner` (a plugin's dispatcher) decided in its own thread, within the deadline, its
    outcome's shape checked."""

    def __init__(self, inner: Any, name: str, kind: int) -> None:
        self.inner = inner
        self.name = name
        self.kind = kind
        self._overruns: list[threading.Thread] = []  # decisions past their deadline
        self._lock = threading.Lock()
        watch_process_exits()

    def decide(self, problem: Problem, control: SearchControl) -> Outcome:
        with self._lock:
            self._overruns = [t for t in self._overruns if t.is_alive()]
            if self._overruns:
                raise StillRunning(self.name, "an earlier decision ran past its deadline and "
                                   "still runs; not started again until it ends")
        own = own_copy(problem)
        run = PluginRun("dispatcher", self.name, "decide",
                        lambda: self.inner.decide(own, control), f"plugin-{self.name}")
        thread = run.thread
        while not run.wait(control.remaining()):
            if control.cancelled():  # nobody waits: the pipeline abandons the decision
                return Outcome(placements={}, status=SolveStatus.HEURISTIC)
            if control.remaining() <= 0:
                with self._lock:
                    self._overruns.append(thread)
                raise RanPastDeadline(self.name, "no answer by the decision's deadline")
        result = run.outcome()
        if isinstance(result, Exception):
            raise result  # the pipeline's dispatcher error, as a built-in's
        if isinstance(result, BaseException):  # SystemExit and the like stop nothing here
            raise PluginFailure(self.name, f"raised {type(result).__name__}: {result}")
        problem_text = outcome_problem(result, problem)
        if problem_text is not None:
            raise MalformedOutcome(self.name, problem_text)
        return result


def own_copy(problem: Problem) -> Problem:
    """`problem` as a plugin may change it, in any way Python allows, without changing
    `problem`, what a session keeps, or what the fallback and the check read: its own queue of
    its own jobs (a frozen job is changed by `object.__setattr__` too), its own free pool with
    nothing shared (`FreePool.deep_copy`: node sets, heaps, score cache) and its own running
    table (arrays copied); the rest is immutable (tuples of tuples and strings) or made again
    on first use (the caches).

    What it costs, at 10,000 nodes (`synthetic_snapshot`, 30-70 % busy, 3-4 free vectors):
    about 0.8 ms with 100 queued jobs, 5-7 ms with 1,000 (the jobs, one by one), where the
    problem itself took 90-250 ms to build; 18 ms when every node has a free vector of its own
    (10,000 groups). Views a plugin could not change would save that and cost a wrapper on
    every read of every dispatcher: a copy for the plugins alone is the cheaper rule."""
    running = problem.running
    return Problem(
        t=problem.t, resources=tuple(problem.resources), node_ids=tuple(problem.node_ids),
        capacity=tuple(problem.capacity), eligible=tuple(problem.eligible),
        free_now=problem.free_now.deep_copy(),
        running=RunningTable(nodes=running.nodes.copy(), amounts=running.amounts.copy(),
                             ends=running.ends.copy(), up=running.up.copy(),
                             limits=None if running.limits is None else running.limits.copy()),
        jobs=[_job_copy(job) for job in problem.jobs], up_capacity=tuple(problem.up_capacity),
        eligibility=problem.eligibility,  # read-only by contract: the check keeps it honest
    )


# A job's fields, each an immutable value (numbers, strings, tuples): a job copied field by
# field shares nothing changeable (`copy.copy` takes ten times longer).
_JOB_FIELDS = tuple(f.name for f in dataclasses.fields(Job))


def _job_copy(job: Job, new: Any = object.__new__, put: Any = object.__setattr__) -> Job:
    """A new Job equal to `job`."""
    made: Job = new(Job)
    for name in _JOB_FIELDS:
        put(made, name, getattr(job, name))
    return made


def _index(value: object, size: int) -> bool:
    """`value` is an integer index into a list of `size` (bool is not)."""
    return isinstance(value, Integral) and not isinstance(value, bool) and 0 <= int(value) < size


def _count(value: object) -> bool:
    return isinstance(value, Integral) and not isinstance(value, bool) and int(value) >= 0


def _seconds(value: object) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value) \
        and float(value) >= 0


def outcome_problem(outcome: object, problem: Problem) -> str | None:
    """What makes `outcome` unreadable as the Outcome of a decision on `problem`, or None."""
    if not isinstance(outcome, Outcome):
        return f"returned {type(outcome).__name__}, not an Outcome"
    jobs, nodes = len(problem.jobs), len(problem.node_ids)
    if not isinstance(outcome.placements, dict):
        return "placements: not a dict of job index -> node index of each unit"
    for i, units in outcome.placements.items():
        if not _index(i, jobs):
            return f"placements: {i!r} is not a job index of the problem (0..{jobs - 1})"
        if not isinstance(units, list | tuple) or not all(_index(n, nodes) for n in units):
            return f"placements[{i}]: not a list of node indices of the problem (0..{nodes - 1})"
    if not (_count(outcome.status) and outcome.status in _STATUSES):
        return f"status: {outcome.status!r} is not a SolveStatus value"
    if not isinstance(outcome.considered, list) or not all(
            _index(i, jobs) for i in outcome.considered):
        return "considered: not a list of job indices of the problem"
    if not isinstance(outcome.skipped, list) or not all(
            isinstance(s, tuple) and len(s) == 2 and _index(s[0], jobs)
            and s[1] in _SKIP_REASONS for s in outcome.skipped):
        return "skipped: not a list of (job index, SkipReason value)"
    return _report_problem(outcome, jobs)


def _report_problem(outcome: Outcome, jobs: int) -> str | None:
    """The report's fields of `outcome` (attempts, model size, times, plan), as the answer
    reads them."""
    if not isinstance(outcome.attempts, list) or not all(
            isinstance(a, AttemptRecord) for a in outcome.attempts):
        return "attempts: not a list of AttemptRecord"
    if not (_count(outcome.variables) and _count(outcome.constraints)):
        return "variables / constraints: not counts (integers >= 0)"
    if not (_seconds(outcome.build_seconds) and _seconds(outcome.solve_seconds)):
        return "build_seconds / solve_seconds: not finite seconds >= 0"
    objective = outcome.objective
    if objective is not None and not (isinstance(objective, Real) and math.isfinite(objective)):
        return f"objective: {objective!r} is not a finite number"
    starts = outcome.expected_starts
    if not isinstance(starts, dict) or not all(
            _index(i, jobs) and isinstance(v, tuple) and len(v) == 2 and _count(v[0])
            and isinstance(v[1], bool) for i, v in starts.items()):
        return "expected_starts: not a dict of job index -> (seconds after t, promised)"
    moved = outcome.promises_moved
    if not isinstance(moved, dict) or not all(
            _index(i, jobs) and _count(v) for i, v in moved.items()):
        return "promises_moved: not a dict of job index -> seconds"
    return None
