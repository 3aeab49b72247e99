"""The caller scopes (client identity, cluster) the knowledge base holds something for, in the
order they were last used, within two bounds: clusters per identity and identities.

One more cluster of an identity beyond `per_identity` drops that identity's own least recently
used cluster, never another identity's: so no caller can push out what another keeps. One more
identity beyond `identities` drops every cluster of the identity used least recently; a caller
alone cannot do that, since its identity is that of its client certificate (without client
certificates every caller is the identity "").
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

from ..domain.caller_scope import CallerScope

V = TypeVar("V")

Dropped = list[tuple[CallerScope, V]]


class ScopeBook(Generic[V]):
    """A value per scope, the least recently used first; not thread-safe by itself."""

    def __init__(self, per_identity: int | None = None, identities: int | None = None) -> None:
        self.per_identity = per_identity
        self.identities = identities
        self._by_identity: OrderedDict[str, OrderedDict[str, V]] = OrderedDict()

    def __len__(self) -> int:
        return sum(len(clusters) for clusters in self._by_identity.values())

    def get(self, scope: CallerScope) -> V | None:
        """The scope's value (not counted as a use), or None."""
        clusters = self._by_identity.get(scope.identity)
        return None if clusters is None else clusters.get(scope.cluster)

    def scopes(self) -> list[CallerScope]:
        """Every scope held, by identity (the least recently used first)."""
        return [CallerScope(identity, cluster)
                for identity, clusters in self._by_identity.items() for cluster in clusters]

    def put(self, scope: CallerScope, value: V) -> Dropped[V]:
        """Hold `value` for the scope, as the one used last; returns the scopes dropped to stay
        within the bounds, with their values."""
        clusters = self._by_identity.setdefault(scope.identity, OrderedDict())
        clusters[scope.cluster] = value
        clusters.move_to_end(scope.cluster)
        self._by_identity.move_to_end(scope.identity)
        return self._within_bounds(scope.identity)

    def put_first(self, scope: CallerScope, value: V) -> None:
        """Hold `value` for the scope as its identity's least recently used (a new identity as
        the least recently used one), beyond the bounds if need be: the next `put` that goes
        past them drops it first."""
        if scope.identity not in self._by_identity:
            self._by_identity[scope.identity] = OrderedDict()
            self._by_identity.move_to_end(scope.identity, last=False)
        clusters = self._by_identity[scope.identity]
        clusters[scope.cluster] = value
        clusters.move_to_end(scope.cluster, last=False)

    def pop(self, scope: CallerScope) -> V | None:
        clusters = self._by_identity.get(scope.identity)
        if clusters is None:
            return None
        value = clusters.pop(scope.cluster, None)
        if not clusters:
            del self._by_identity[scope.identity]
        return value

    def _within_bounds(self, identity: str) -> Dropped[V]:
        dropped: Dropped[V] = []
        clusters = self._by_identity[identity]
        while self.per_identity is not None and len(clusters) > self.per_identity:
            cluster, value = clusters.popitem(last=False)
            dropped.append((CallerScope(identity, cluster), value))
        while self.identities is not None and len(self._by_identity) > self.identities:
            gone, kept = self._by_identity.popitem(last=False)
            dropped.extend((CallerScope(gone, cluster), value) for cluster, value in kept.items())
        return dropped
