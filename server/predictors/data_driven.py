"""Data driven (Galleguillos et al., MOD 2017): the run time of the closest earlier job.

The rules look for the most recently completed job (by end time, on the same cluster) that
resembles the job, from the closest resemblance to the loosest, and predict its actual run time:

1. full profile: same user, same name and same request shape (queue, units, per-unit amounts);
2. same user and same name, any request;
3. same name, any user (the same application);
4. same name prefix, any user: the name without path, case, extension and trailing counter
   ("run_041.sh" and "Run-042" are both "run", see `job_keys.name_prefix`);
5. the user's last job, whatever it was;
6. none of these: the requested (wall) time.

An empty name (or prefix) takes part in no rule, so traces without job names fall through to
rule 5. Whatever rule answers, d_i is capped by the requested time and is at least 1 s.
"""

from __future__ import annotations

from typing import ClassVar

from hpcdispatch.server.predictors.base import Completion, JobFacts, clamp
from hpcdispatch.server.predictors.job_keys import name_prefix, request_shape
from hpcdispatch.server.predictors.knowledge_base import ClusterHistory, HistoryFilter


def resemblance_rules(job: JobFacts) -> list[HistoryFilter]:
    """Rules 1-5 for this job, closest first; those that need a name are left out without one."""
    rules: list[HistoryFilter] = []
    name = job.name.strip()
    if name:
        rules.append(HistoryFilter(user=job.user, name=job.name, shape=request_shape(job)))
        rules.append(HistoryFilter(user=job.user, name=job.name))
        rules.append(HistoryFilter(name=job.name))
    prefix = name_prefix(job.name)
    if prefix:
        rules.append(HistoryFilter(name_prefix=prefix))
    rules.append(HistoryFilter(user=job.user))
    return rules


class DataDrivenPredictor:
    name: ClassVar[str] = "data_driven"

    def __init__(self, history: ClusterHistory) -> None:
        self.history = history

    def predict(self, job: JobFacts) -> int:
        for rule in resemblance_rules(job):
            run_times = self.history.last_run_times(rule, limit=1)
            if run_times:
                return clamp(run_times[0], job)
        return clamp(job.requested_time, job)

    def learn(self, completion: Completion) -> None:
        self.history.record([completion])
