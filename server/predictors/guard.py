"""A plugin's predictor behind a guard: whatever it does, a decision gets a duration for each job.

A predictor registered by another package than hpcdispatch (docs/plugins.md) is made behind
`GuardedPredictor`, fenced as a plugin's dispatcher is (dispatchers/guard.py):

- it predicts in a thread of its own, recorded as a plugin call (`domain/plugin_calls.py`: a
  plugin that ends the process is named in the log first), on its own copy of the jobs' facts;
- the decision waits for it until the bound `predictions_until` set (the pipeline gives the
  predict stage a share of the decision's deadline, `pipeline.PREDICTION_SHARE`; outside a
  decision, STANDALONE_SECONDS) or until the caller is gone. Past it, the decision goes on
  without it; while such an overrun still runs, the plugin is not called again, so a plugin
  that never answers holds one thread, not a decision thread per call.

When its code failed to load, when it raises, when it answers late, or when its answer is not
one positive number per job, the batch is answered with the jobs' requested times (what
`walltime` predicts), and the failure is reported with the plugin's name: a log line and the
registry's failure listener (the server counts it in `hpcdispatch_predictor_failures_total`). A
number above a job's requested time is capped there, as every predictor's is (`clamp`).
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from numbers import Real
from typing import Any

from ..domain.duration_predictor import Completion, JobFacts, clamp, predict_many
from ..domain.lazy_logger import LazyLogger
from ..domain.plugin_calls import PluginRun, watch_process_exits
from ..domain.repeated_failures import RepeatedFailures

log = LazyLogger("hpcdispatch.predictors")

# (predictor name, reason, detail); reason is one of REASONS (a metric label).
FailureListener = Callable[[str, str, str], None]
LOAD_FAILED, RAISED, INVALID, LATE = "load_failed", "raised", "invalid", "deadline_passed"
REASONS = (LOAD_FAILED, RAISED, INVALID, LATE)
# How long a plugin's answer is waited for when no decision bounds it (`predictions_until`),
# seconds.
STANDALONE_SECONDS = 5.0


@dataclasses.dataclass(frozen=True, slots=True)
class PredictionBound:
    """Until when (time.monotonic()) a plugin's predictions are waited for, and whether the
    caller is gone."""

    deadline: float
    cancelled: Callable[[], bool]


_bound: ContextVar[PredictionBound | None] = ContextVar("prediction_bound", default=None)


@contextmanager
def predictions_until(deadline: float, cancelled: Callable[[], bool]) -> Iterator[None]:
    """Within the block, plugins' predictions in this context are waited for until `deadline`
    (time.monotonic()) at most, and not once `cancelled()`."""
    token = _bound.set(PredictionBound(deadline, cancelled))
    try:
        yield
    finally:
        _bound.reset(token)


class _Late(Exception):
    """The plugin did not answer within its bound (or an earlier call of it still runs)."""


class _Raised(Exception):
    """The plugin raised (anything, SystemExit included): `str()` names it."""


class _Gone(Exception):
    """The caller went away while the plugin predicted: nobody waits for the answer."""


def no_listener(name: str, reason: str, detail: str) -> None:
    """The failure listener that only the log hears."""
    return None


def answer_problem(answer: object, jobs: Sequence[JobFacts]) -> str | None:
    """What makes `answer` not one positive finite number per job, or None."""
    if not isinstance(answer, list | tuple):
        return f"answered {type(answer).__name__}, not a list of seconds"
    if len(answer) != len(jobs):
        return f"answered {len(answer)} durations for {len(jobs)} jobs"
    for i, value in enumerate(answer):
        if isinstance(value, bool) or not isinstance(value, Real) or not (
                math.isfinite(value) and float(value) > 0):
            return f"duration {i}: {value!r} is not a positive number of seconds"
    return None


class GuardedPredictor:
    """`inner` (a plugin's predictor; None when its code failed to load, `load_error` saying
    why) answering every batch."""

    def __init__(self, inner: Any, name: str, on_failure: FailureListener = no_listener,
                 load_error: str = "") -> None:
        self.inner = inner
        self.name = name
        self.on_failure = on_failure
        self.load_error = load_error
        # A predictor whose d_i depends on the job alone may say so (base.depends_on_job_only).
        self.job_only = getattr(inner, "job_only", False) is True
        self._overruns: list[threading.Thread] = []  # calls past their bound, still running
        self._lock = threading.Lock()
        self._failures = RepeatedFailures()  # by reason, for the log lines
        watch_process_exits()

    def predict(self, job: JobFacts) -> int:
        return self.predict_many([job])[0]

    def predict_many(self, jobs: Sequence[JobFacts]) -> list[int]:
        if self.inner is None:
            return self._requested(jobs, LOAD_FAILED, self.load_error, log_it=False)
        if not jobs:
            return []
        try:
            answer = self._answer_of(jobs)
        except _Late as late:
            return self._requested(jobs, LATE, str(late))
        except _Gone:
            return self._requested(jobs, LATE, "", log_it=False, report=False)
        except _Raised as raised:  # a plugin's bug must not cost a decision its durations
            return self._requested(jobs, RAISED, str(raised))
        problem = answer_problem(answer, jobs)
        if problem is not None:
            return self._requested(jobs, INVALID, problem)
        return [clamp(value, job) for value, job in zip(answer, jobs, strict=True)]

    def _answer_of(self, jobs: Sequence[JobFacts]) -> Any:
        """The plugin's answer for its own copy of `jobs`, from a thread of its own, within
        the bound; _Raised when it raised, _Late or _Gone when it did not answer in time."""
        with self._lock:
            self._overruns = [t for t in self._overruns if t.is_alive()]
            if self._overruns:
                raise _Late("an earlier call ran past its deadline and still runs; not called "
                            "again until it ends")
        bound = _bound.get() or PredictionBound(time.monotonic() + STANDALONE_SECONDS,
                                                lambda: False)
        own = [dataclasses.replace(job, unit_request=dict(job.unit_request)) for job in jobs]
        run = PluginRun("predictor", self.name, "predict_many",
                        lambda: predict_many(self.inner, own), f"plugin-predictor-{self.name}")
        thread = run.thread
        while not run.wait(bound.deadline - time.monotonic()):
            if bound.cancelled() or bound.deadline <= time.monotonic():
                with self._lock:
                    self._overruns.append(thread)
                if bound.cancelled():
                    raise _Gone()
                raise _Late("no answer by the decision's deadline for its predictions")
        result = run.outcome()
        if isinstance(result, BaseException):  # SystemExit and the like stop nothing here
            raise _Raised(f"{type(result).__name__}: {result}")
        return result

    def learn(self, completion: Completion) -> None:
        learn = getattr(self.inner, "learn", None)
        if learn is None:
            return
        try:
            learn(completion)
        except Exception as exc:
            self._report(RAISED, f"in learn: {type(exc).__name__}: {exc}")

    def _requested(self, jobs: Sequence[JobFacts], reason: str, detail: str,
                   log_it: bool = True, report: bool = True) -> list[int]:
        """The requested times of `jobs`, the failure reported."""
        if report:
            self._report(reason, detail, log_it)
        return [clamp(job.requested_time, job) for job in jobs]

    def _report(self, reason: str, detail: str, log_it: bool = True) -> None:
        """Count the failure; log the first of its reason, then the 10th, 100th, ..."""
        seen = self._failures.count(reason)
        if log_it and RepeatedFailures.worth_a_line(seen):
            log.error("predictor failed; the requested times answer", predictor=self.name,
                      reason=reason, error=detail,
                      **({"failures_so_far": seen} if seen > 1 else {}))
        self.on_failure(self.name, reason, detail)
