"""One set of predictors per cluster name, all reading that cluster's history in one knowledge base.

`learn` stores each completion once in the knowledge base; every predictor of the cluster sees it
from there. With `store_path` the knowledge base is an SQLite file or a PostgreSQL URL
(`store_location`), so a new registry on the same store (a restarted server, another replica)
predicts from the same history. A cluster's predictors live with its history in the knowledge
base, so they are bounded with it (`KnowledgeBaseLimits.max_clusters`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from types import TracebackType

from hpcdispatch.v1 import dispatcher_pb2 as pb

from .base import Completion, DurationPredictor
from .data_driven import DataDrivenPredictor
from .knowledge_base import (
    ClusterHistory,
    FallbackListener,
    KnowledgeBase,
    KnowledgeBaseLimits,
)
from .last_two import LastTwoPredictor
from .oracle import OraclePredictor
from .walltime import WalltimePredictor

Factory = Callable[[ClusterHistory], DurationPredictor]  # a cluster's history -> predictor


class PredictorRegistry:
    def __init__(
        self, store_path: str | None = None, on_store_fallback: FallbackListener | None = None,
        limits: KnowledgeBaseLimits | None = None,
    ) -> None:
        """`store_path`: the knowledge base's SQLite file (created if missing) or PostgreSQL URL;
        None = in memory. `on_store_fallback(cluster)`: called when predictions went on without
        reading the store (it was unavailable). `limits`: what the knowledge base keeps (None:
        no limit). OSError if the store cannot be opened."""
        self.knowledge_base = KnowledgeBase(store_path, on_fallback=on_store_fallback,
                                            limits=limits)
        self._factories: dict[int, Factory] = {
            pb.PREDICTOR_WALLTIME: lambda history: WalltimePredictor(),
            pb.PREDICTOR_LAST_TWO: LastTwoPredictor,
            pb.PREDICTOR_DATA_DRIVEN: DataDrivenPredictor,
            pb.PREDICTOR_ORACLE: lambda history: OraclePredictor(),
        }
        self._lock = threading.Lock()

    def register(self, kind: int, factory: Factory) -> None:
        with self._lock:
            self._factories[kind] = factory

    def factory(self, kind: int) -> Factory:
        """The factory registered for a kind (KeyError if none), e.g. to wrap it."""
        with self._lock:
            return self._factories[kind]

    def kinds(self) -> list[int]:
        with self._lock:
            return sorted(self._factories)

    def predictor(self, cluster: str, kind: int) -> DurationPredictor:
        """The cluster's predictor of this kind; KeyError for a kind not registered."""
        factory = self.factory(kind)
        return self.knowledge_base.history(cluster).predictor(kind, factory)

    def learn(self, cluster: str, completions: Iterable[Completion]) -> int:
        """Store the completions once for all the cluster's predictors; returns how many.

        Completions already known (same job id and start time) count but are not stored twice.
        Returns only once they are durably stored. Raises ValueError, storing nothing, if one
        ends before it starts, and `completion_store.StoreUnavailable` if the store could not
        be written within its retries (answer UNAVAILABLE: the caller retries).
        """
        batch = list(completions)
        self.knowledge_base.record(cluster, batch)
        return len(batch)

    def close(self) -> None:
        self.knowledge_base.close()

    def __enter__(self) -> PredictorRegistry:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
