"""What a predictor plugin may import: the job facts a prediction reads, and the cluster's history
of completed jobs as the built-in predictors read it. Everything else in `hpcdispatch.server`
may move between releases; these names stay (docs/plugins.md).

A predictor is registered in the entry point group `hpcdispatch.predictors` as a class (or
callable) called with the cluster's `ClusterHistory`; what it makes answers
`predict_many(jobs: Sequence[JobFacts]) -> list[int]` (or `predict(job) -> int`): d_i in
seconds, at least 1 and at most the job's `requested_time` (`clamp` bounds a number so). It
may say `job_only = True` when d_i depends on the job alone, so that an answer may be kept for
the job's life.

The history keeps, for every user (and name, name prefix, request shape), the run times of the
latest `DEPTH` completed jobs, as the workload manager reports them (`ReportCompletions`), per
cluster and client identity (a caller's predictors read only what that caller reported; see
`knowledge_base`), within the knowledge base's limits (docs/configuration.md). `latest_run_times`
reads them for a whole batch in one look (at most one store round trip).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..domain.duration_predictor import JobFacts, clamp
from .history_index import DEPTH, HistoryFilter
from .job_keys import kept
from .knowledge_base import ClusterHistory

__all__ = ["DEPTH", "ClusterHistory", "JobFacts", "clamp", "latest_run_times"]


def latest_run_times(history: ClusterHistory, jobs: Sequence[JobFacts],
                     limit: int = DEPTH) -> list[list[int]]:
    """For each job, the run times (seconds) of its user's latest `limit` (<= DEPTH) completed
    jobs on this cluster, the latest first; empty for a user with none."""
    with history.reading() as index:
        return [index.last_run_times(HistoryFilter(user=kept(job.user)), limit)
                for job in jobs]
