"""A random history of completions, and the predictions of the whole of it, for the knowledge
base's limits (tests/server/predictors/test_knowledge_base_limits.py, and
tests/server/predictors/test_postgres_store.py on a real PostgreSQL server)."""

from __future__ import annotations

import random

from hpcdispatch.server.domain.duration_predictor import Completion, JobFacts, clamp
from hpcdispatch.server.predictors.data_driven import DataDrivenPredictor, resemblance_rules
from hpcdispatch.server.predictors.history_index import HistoryFilter
from hpcdispatch.server.predictors.job_keys import kept
from hpcdispatch.server.predictors.knowledge_base import KnowledgeBase
from hpcdispatch.server.predictors.last_two import LastTwoPredictor
from hpcdispatch.server.predictors.store_sqlite import SqliteStore

REQUESTED = 100_000


def job(rng: random.Random) -> JobFacts:
    """A job of 12 users, 9 names (some sharing a prefix, some blank), 3 shapes."""
    return JobFacts(
        user=f"u{rng.randrange(12)}", name=rng.choice(["", "sim_1", "sim_2", "post.sh", "a", "b",
                                                       "c", "d", "e"]),
        queue="batch", units=rng.choice([1, 2, 4]), unit_request={"core": 1},
        requested_time=REQUESTED,
    )


def history(seed: int, completions: int) -> list[Completion]:
    """`completions` completions, mostly in end-time order, one in ten reported late."""
    rng = random.Random(seed)
    done = []
    for i in range(completions):
        end = 1_000 + 10 * i - (rng.randrange(2_000) if rng.random() < 0.1 else 0)
        run = rng.randrange(1, 5_000)
        done.append(Completion(f"j{i}", job(rng), end - run, end))
    return done


def probes(seed: int) -> list[JobFacts]:
    rng = random.Random(seed + 1)
    return [job(rng) for _ in range(60)]


def predictions(kb: KnowledgeBase, cluster: str, jobs: list[JobFacts]) -> list[tuple[int, int]]:
    """(data_driven, last_two) of each job, from the knowledge base."""
    history_ = kb.history(cluster)
    return list(zip(DataDrivenPredictor(history_).predict_many(jobs),
                    LastTwoPredictor(history_).predict_many(jobs), strict=True))


def whole_history(store: SqliteStore, cluster: str, jobs: list[JobFacts]) -> list[tuple[int, int]]:
    """(data_driven, last_two) of each job, asked of every completion the store holds."""
    return [(whole_history_data_driven(store, cluster, job),
             whole_history_last_two(store, cluster, job)) for job in jobs]


def whole_history_data_driven(store: SqliteStore, cluster: str, job: JobFacts) -> int:
    """data_driven's prediction, asked of every completion ever stored (the store's query)."""
    for rule in resemblance_rules(job):
        found = store.last_run_times(cluster, rule, 1)
        if found:
            return clamp(found[0], job)
    return clamp(job.requested_time, job)


def whole_history_last_two(store: SqliteStore, cluster: str, job: JobFacts) -> int:
    found = store.last_run_times(cluster, HistoryFilter(user=kept(job.user)), 2)
    return clamp(sum(found) / len(found), job) if found else clamp(job.requested_time, job)
