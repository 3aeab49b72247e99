"""The interface of a duration predictor, and the job facts it may use.

A predictor answers d_i in seconds (>= 1, never above the job's requested time) for a queued or
running job, from what the knowledge base learned of completed jobs. The service asks it for a
whole decision's jobs at once (`predict_many`: at most one store round trip for the batch).
Reported completions go to the cluster's knowledge base once, through `PredictorRegistry.learn`;
a predictor's own `learn` is for using it on its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from hpcdispatch.snapshot import Resources


@dataclass(frozen=True, slots=True)
class JobFacts:
    """What a predictor may look at: the job as submitted (and the truth, in simulation)."""

    user: str
    name: str
    queue: str
    units: int
    unit_request: Resources
    requested_time: int
    actual_duration: int | None = None  # oracle only


@dataclass(frozen=True, slots=True)
class Completion:
    """A finished job: its facts and its actual run time."""

    job_id: str
    facts: JobFacts
    start_time: int
    end_time: int

    @property
    def run_time(self) -> int:
        return self.end_time - self.start_time


class DurationPredictor(Protocol):
    """A cluster's predictor (the built-ins also carry a `name` class attribute; a plugin's is
    the name it is registered under)."""

    def predict(self, job: JobFacts) -> int:
        """d_i in seconds, 1 <= d_i <= requested_time."""
        ...

    def predict_many(self, jobs: Sequence[JobFacts]) -> list[int]:
        """d_i of every job, in order; at most one store round trip for the whole batch."""
        ...

    def learn(self, completion: Completion) -> None:
        """Record a finished job in the knowledge this predictor reads (if any)."""
        ...


def depends_on_job_only(predictor: DurationPredictor) -> bool:
    """Whether the predictor's d_i of a job depends on the job's facts alone (a class
    attribute `job_only = True`: walltime, oracle), so that an answer may be kept for the
    job's life; a predictor that learns has no such attribute."""
    return getattr(predictor, "job_only", False) is True


def predict_many(predictor: DurationPredictor, jobs: Sequence[JobFacts]) -> list[int]:
    """d_i of every job of one decision, in order: the predictor's batched `predict_many` when
    it has one (one look-up for the whole decision), else one `predict` per job."""
    batched = getattr(predictor, "predict_many", None)
    if batched is not None:
        return list(batched(jobs))
    return [predictor.predict(job) for job in jobs]


def clamp(prediction: float, job: JobFacts) -> int:
    """Round and bound a prediction to [1, requested_time]."""
    return max(1, min(job.requested_time, round(prediction)))
