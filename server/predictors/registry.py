"""One set of predictors per cluster name, sharing that cluster's knowledge base."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable

from hpcdispatch.server.predictors.base import Completion, DurationPredictor
from hpcdispatch.server.predictors.oracle import OraclePredictor
from hpcdispatch.server.predictors.walltime import WalltimePredictor
from hpcdispatch.v1 import dispatcher_pb2 as pb

Factory = Callable[[str], DurationPredictor]  # cluster name -> predictor


class PredictorRegistry:
    def __init__(self) -> None:
        self._factories: dict[int, Factory] = {
            pb.PREDICTOR_WALLTIME: lambda cluster: WalltimePredictor(),
            pb.PREDICTOR_ORACLE: lambda cluster: OraclePredictor(),
        }
        self._instances: dict[tuple[str, int], DurationPredictor] = {}
        self._lock = threading.Lock()

    def register(self, kind: int, factory: Factory) -> None:
        self._factories[kind] = factory

    def kinds(self) -> list[int]:
        return sorted(self._factories)

    def predictor(self, cluster: str, kind: int) -> DurationPredictor:
        with self._lock:
            key = (cluster, kind)
            if key not in self._instances:
                self._instances[key] = self._factories[kind](cluster)
            return self._instances[key]

    def learn(self, cluster: str, completions: Iterable[Completion]) -> int:
        """Every predictor of the cluster learns every completion; returns how many."""
        batch = list(completions)
        for kind in self.kinds():
            predictor = self.predictor(cluster, kind)
            for completion in batch:
                predictor.learn(completion)
        return len(batch)
