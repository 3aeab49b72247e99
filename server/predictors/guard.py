"""A plugin's predictor behind a guard: whatever it does, a decision gets a duration for each job.

A predictor registered by another package than hpcdispatch (docs/plugins.md) is made behind
`GuardedPredictor`. When its code failed to load, when it raises, or when its answer is not one
positive number per job, the batch is answered with the jobs' requested times (what `walltime`
predicts), and the failure is reported with the plugin's name: a log line and the registry's
failure listener (the server counts it in `hpcdispatch_predictor_failures_total`). A number
above a job's requested time is capped there, as every predictor's is (`clamp`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from numbers import Real
from typing import Any

import structlog

from ..domain.duration_predictor import Completion, JobFacts, clamp, predict_many

log = structlog.get_logger("hpcdispatch.predictors")

# (predictor name, reason, detail); reason is one of REASONS (a metric label).
FailureListener = Callable[[str, str, str], None]
LOAD_FAILED, RAISED, INVALID = "load_failed", "raised", "invalid"
REASONS = (LOAD_FAILED, RAISED, INVALID)


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

    def predict(self, job: JobFacts) -> int:
        return self.predict_many([job])[0]

    def predict_many(self, jobs: Sequence[JobFacts]) -> list[int]:
        if self.inner is None:
            return self._requested(jobs, LOAD_FAILED, self.load_error, log_it=False)
        try:
            answer = predict_many(self.inner, jobs)
        except Exception as exc:  # a plugin's bug must not cost a decision its durations
            return self._requested(jobs, RAISED, f"{type(exc).__name__}: {exc}")
        problem = answer_problem(answer, jobs)
        if problem is not None:
            return self._requested(jobs, INVALID, problem)
        return [clamp(value, job) for value, job in zip(answer, jobs, strict=True)]

    def learn(self, completion: Completion) -> None:
        learn = getattr(self.inner, "learn", None)
        if learn is None:
            return
        try:
            learn(completion)
        except Exception as exc:
            self._report(RAISED, f"in learn: {type(exc).__name__}: {exc}")

    def _requested(self, jobs: Sequence[JobFacts], reason: str, detail: str,
                   log_it: bool = True) -> list[int]:
        """The requested times of `jobs`, the failure reported."""
        self._report(reason, detail, log_it)
        return [clamp(job.requested_time, job) for job in jobs]

    def _report(self, reason: str, detail: str, log_it: bool = True) -> None:
        if log_it:
            log.error("predictor failed; the requested times answer", predictor=self.name,
                      reason=reason, error=detail)
        self.on_failure(self.name, reason, detail)
