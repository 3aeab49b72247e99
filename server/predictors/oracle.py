"""Oracle (simulation only): d_i is the job's actual run time, a lower-bound baseline.

A job that would overrun its requested time is killed then, so the oracle caps at it. Without
an actual duration (a real cluster) the oracle falls back to the requested time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from ..domain.duration_predictor import Completion, JobFacts, clamp


class OraclePredictor:
    name: ClassVar[str] = "oracle"
    # README.md and docs/configuration.md name it so (scripts/gen_tables.py).
    summary: ClassVar[str] = "actual run time, simulation only"
    job_only: ClassVar[bool] = True  # d_i depends on the job alone

    def __init__(self, history: object = None) -> None:
        """`history`: the cluster's, as every registered predictor is made; not read."""

    def predict(self, job: JobFacts) -> int:
        if job.actual_duration is None:
            return clamp(job.requested_time, job)
        return clamp(job.actual_duration, job)

    def predict_many(self, jobs: Sequence[JobFacts]) -> list[int]:
        return [self.predict(job) for job in jobs]

    def learn(self, completion: Completion) -> None:
        return None
