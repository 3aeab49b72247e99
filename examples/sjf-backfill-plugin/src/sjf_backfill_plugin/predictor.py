"""User-longest: the longest of the user's latest run times, never above the requested time.

The knowledge base keeps each user's latest completed jobs (`DEPTH`, two) per cluster. A
backfilling dispatcher is hurt more by a job that outlives its prediction (the head's
reservation slips) than by one that ends early, so this predictor takes the longest of those
run times rather than their mean (`last-two`); a user without a completed job gets the
requested time.
"""

from __future__ import annotations

from collections.abc import Sequence

from hpcdispatch.server.predictors.api import ClusterHistory, JobFacts, clamp, latest_run_times


class UserLongest:
    """Registered as `user-longest` (pyproject.toml, group `hpcdispatch.predictors`); made with
    the cluster's history."""

    def __init__(self, history: ClusterHistory) -> None:
        self.history = history

    def predict_many(self, jobs: Sequence[JobFacts]) -> list[int]:
        runs = latest_run_times(self.history, jobs)  # one read for the whole batch
        return [clamp(max(times) if times else job.requested_time, job)
                for job, times in zip(jobs, runs, strict=True)]
