"""One set of predictors per caller scope (client identity and cluster name), all reading that
scope's history in one knowledge base.

`learn` stores each completion once in the knowledge base, in the scope of the identity that
reported it; every predictor of that scope sees it from there, no other scope's does. With
`store_path` the knowledge base is an SQLite file or a PostgreSQL URL (`store_location`), so a
new registry on the same store (a restarted server, another replica) predicts from the same
history. A scope's predictors live with its history in the knowledge base, so they are bounded
with it (`KnowledgeBaseLimits.max_clusters`, `max_identities`).

The predictors are the ones registered by name (entry point group `hpcdispatch.predictors`,
`hpcdispatch.registrations`): the built-ins and the plugins. Each registered object is called
with the scope's history to make that scope's predictor, its code imported on first use; a
plugin's is made behind `guard.GuardedPredictor`, so that one failing to load, raising or
answering junk costs a decision its predictions only (the requested times answer), reported
with its name.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any

from hpcdispatch.catalog import registered_predictors
from hpcdispatch.registrations import Registered, Registrations

from ..domain.duration_predictor import Completion, DurationPredictor
from ..domain.lazy_logger import LazyLogger
from .guard import LOAD_FAILED, FailureListener, GuardedPredictor, no_listener
from .knowledge_base import (
    ClusterHistory,
    FallbackListener,
    KnowledgeBase,
    KnowledgeBaseLimits,
)

Factory = Callable[[ClusterHistory], DurationPredictor]  # a scope's history -> predictor

log = LazyLogger("hpcdispatch.predictors")


class _Loaded:
    """A registered predictor's object, loaded once (or the reason it could not be)."""

    def __init__(self, entry: Registered) -> None:
        self.entry = entry
        self._lock = threading.Lock()
        self._done = False
        self.made: Any = None
        self.error = ""

    def load(self) -> Any:
        with self._lock:
            if not self._done:
                self._done = True
                try:
                    self.made = self.entry.load()
                except (Exception, SystemExit) as exc:  # a plugin's import may do anything
                    self.error = f"{type(exc).__name__}: {exc}"
                    log.error("predictor could not be loaded", predictor=self.entry.name,
                              target=self.entry.target, distribution=self.entry.distribution,
                              error=self.error)
            return self.made


class PredictorRegistry:
    def __init__(
        self, store_path: str | None = None, on_store_fallback: FallbackListener | None = None,
        limits: KnowledgeBaseLimits | None = None,
        on_predictor_failure: FailureListener | None = None,
        registrations: Registrations | None = None,
    ) -> None:
        """`store_path`: the knowledge base's SQLite file (created if missing) or PostgreSQL URL;
        None = in memory. `on_store_fallback(cluster)`: called when predictions went on without
        reading the store (it was unavailable). `limits`: what the knowledge base keeps (None:
        no limit). `on_predictor_failure(name, reason, detail)`: called when a plugin's
        predictor failed and the requested times answered (guard.REASONS). `registrations`:
        the predictors to offer (default: those installed). OSError if the store cannot be
        opened."""
        self.knowledge_base = KnowledgeBase(store_path, on_fallback=on_store_fallback,
                                            limits=limits)
        self.registrations = (registrations if registrations is not None
                              else registered_predictors())
        self._on_failure = on_predictor_failure or no_listener
        self._loaded = {e.kind: _Loaded(e) for e in self.registrations.entries}
        self._factories: dict[int, Factory] = {
            kind: self._factory(loaded) for kind, loaded in self._loaded.items()
        }
        self._lock = threading.Lock()

    def _factory(self, loaded: _Loaded) -> Factory:
        """How a scope's predictor of `loaded`'s entry is made: the registered object called
        with the history; a plugin's behind the guard (which answers the requested times when
        it could not be loaded or made)."""
        entry = loaded.entry

        def make(history: ClusterHistory) -> DurationPredictor:
            made = loaded.load()
            if entry.built_in:
                if made is None:
                    raise RuntimeError(f"built-in predictor {entry.name!r}: {loaded.error}")
                return made(history)
            if made is None:
                return GuardedPredictor(None, entry.name, self._on_failure, loaded.error)
            try:
                return GuardedPredictor(made(history), entry.name, self._on_failure)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
                log.error("predictor could not be made", predictor=entry.name, error=error)
                self._on_failure(entry.name, LOAD_FAILED, error)
                return GuardedPredictor(None, entry.name, self._on_failure, error)

        return make

    def load_plugins(self) -> dict[str, str]:
        """Load every plugin's predictor code now (the built-ins stay lazy); returns
        {name: why} of those that could not be loaded."""
        for loaded in self._loaded.values():
            if not loaded.entry.built_in:
                loaded.load()
        return self.unavailable()

    def unavailable(self) -> dict[str, str]:
        """{name: why} of the registered predictors whose code failed to load so far."""
        return {loaded.entry.name: loaded.error for loaded in self._loaded.values()
                if loaded.error}

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

    def predictor(self, cluster: str, kind: int, identity: str = "") -> DurationPredictor:
        """The predictor of this kind of the scope (`identity`, `cluster`): it reads what that
        identity reported for that cluster. KeyError for a kind not registered."""
        factory = self.factory(kind)
        return self.knowledge_base.history(cluster, identity).predictor(kind, factory)

    def learn(self, cluster: str, completions: Iterable[Completion], identity: str = "") -> int:
        """Store the completions `identity` reported once for all the predictors of its scope
        for `cluster`; returns how many.

        Completions already known (same job id and start time) count but are not stored twice.
        Returns only once they are durably stored. Raises ValueError, storing nothing, if one
        ends before it starts, and `completion_store.StoreUnavailable` if the store could not
        be written within its retries (answer UNAVAILABLE: the caller retries).
        """
        batch = list(completions)
        self.knowledge_base.record(cluster, batch, identity)
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
