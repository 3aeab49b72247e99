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

A batch of jobs is answered from one read of the cluster's history index (`history_index`):
each rule is one dictionary look-up, with the job's texts in the form the index keeps them
(`job_keys.kept`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from ..domain.duration_predictor import Completion, JobFacts, clamp
from .history_index import FilterKey, HistoryFilter, HistoryIndex
from .job_keys import kept, name_prefix, request_shape
from .knowledge_base import ClusterHistory


def rule_keys(job: JobFacts) -> list[FilterKey]:
    """The index keys of rules 1-5 for this job, closest first; those that need a name are
    left out without one."""
    keys: list[FilterKey] = []
    user, name = kept(job.user), kept(job.name)
    if job.name.strip():
        keys.append((user, name, None, kept(request_shape(job))))
        keys.append((user, name, None, None))
        keys.append((None, name, None, None))
    prefix = name_prefix(job.name)
    if prefix:
        keys.append((None, None, kept(prefix), None))
    keys.append((user, None, None, None))
    return keys


def resemblance_rules(job: JobFacts) -> list[HistoryFilter]:
    """Rules 1-5 for this job as filters, closest first."""
    return [HistoryFilter(*key) for key in rule_keys(job)]


def predict_from(index: HistoryIndex, job: JobFacts) -> int:
    """The run time of the latest job under the closest rule that has one, else the requested
    time; bounded to [1, requested_time]. The rules of `rule_keys`, in order, except that the
    request shape is built only when the user ran a job of that name (else rule 1 cannot match).
    """
    latest = index.latest_run_time
    user, name = kept(job.user), kept(job.name)
    if job.name.strip():
        same_user_and_name = latest((user, name, None, None))
        if same_user_and_name is not None:
            same_profile = latest((user, name, None, kept(request_shape(job))))
            return clamp(same_user_and_name if same_profile is None else same_profile, job)
        same_name = latest((None, name, None, None))
        if same_name is not None:
            return clamp(same_name, job)
    prefix = name_prefix(job.name)
    if prefix:
        same_prefix = latest((None, None, kept(prefix), None))
        if same_prefix is not None:
            return clamp(same_prefix, job)
    same_user = latest((user, None, None, None))
    if same_user is not None:
        return clamp(same_user, job)
    return clamp(job.requested_time, job)


class DataDrivenPredictor:
    name: ClassVar[str] = "data_driven"
    # README.md and docs/configuration.md name it so (scripts/gen_tables.py).
    summary: ClassVar[str] = "rules over name, user and request"

    def __init__(self, history: ClusterHistory) -> None:
        self.history = history

    def predict(self, job: JobFacts) -> int:
        return self.predict_many([job])[0]

    def predict_many(self, jobs: Sequence[JobFacts]) -> list[int]:
        """One index read (at most one store round trip) for the whole batch."""
        with self.history.reading() as index:
            return [predict_from(index, job) for job in jobs]

    def learn(self, completion: Completion) -> None:
        self.history.record([completion])
