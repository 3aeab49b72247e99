"""Last two (Tsafrir, Etsion, Feitelson 2007): the mean of the user's last two actual run times.

d_i is the mean of the actual run times of the two jobs of the same user (on the same cluster)
that completed last, by end time; with one completed job, that job's run time; with none, the
requested time. It is never above the job's requested time (nor below 1 s).

The history holds actual run times only. (The authors' code stored its own earlier predictions
in the history instead of the run times — a bug this module does not reproduce.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from ..domain.duration_predictor import Completion, JobFacts, clamp
from .history_index import HistoryFilter
from .job_keys import kept
from .knowledge_base import ClusterHistory


class LastTwoPredictor:
    name: ClassVar[str] = "last_two"
    # README.md and docs/configuration.md name it so (scripts/gen_tables.py).
    summary: ClassVar[str] = "mean of the user's last two actual run times"

    def __init__(self, history: ClusterHistory) -> None:
        self.history = history

    def predict(self, job: JobFacts) -> int:
        return self.predict_many([job])[0]

    def predict_many(self, jobs: Sequence[JobFacts]) -> list[int]:
        """One index read (at most one store round trip) for the whole batch."""
        predictions = []
        with self.history.reading() as index:
            for job in jobs:
                run_times = index.last_run_times(HistoryFilter(user=kept(job.user)), 2)
                predictions.append(
                    clamp(sum(run_times) / len(run_times), job) if run_times
                    else clamp(job.requested_time, job)
                )
        return predictions

    def learn(self, completion: Completion) -> None:
        self.history.record([completion])
