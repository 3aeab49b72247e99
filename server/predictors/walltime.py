"""Wall time: d_i is the user's requested time (the classical, over-estimating predictor)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from ..domain.duration_predictor import Completion, JobFacts, clamp


class WalltimePredictor:
    name: ClassVar[str] = "walltime"
    # README.md and docs/configuration.md name it so (scripts/gen_tables.py).
    summary: ClassVar[str] = "requested time"
    job_only: ClassVar[bool] = True  # d_i depends on the job alone

    def __init__(self, history: object = None) -> None:
        """`history`: the cluster's, as every registered predictor is made; not read."""

    def predict(self, job: JobFacts) -> int:
        return clamp(job.requested_time, job)

    def predict_many(self, jobs: Sequence[JobFacts]) -> list[int]:
        return [clamp(job.requested_time, job) for job in jobs]

    def learn(self, completion: Completion) -> None:
        return None
