"""Whose decisions a stateful dispatcher's book belongs to: the caller and its cluster.

A dispatcher that keeps something between decisions (conservative's reservations; a promise
book of the CP dispatchers) must keep it apart per caller: one identity's decision must never
change another's, nor one cluster's another's that happens to name the same nodes. The edge
that authenticated the call sets the `CallerScope` on the decision's SearchControl (the gRPC
edge: the identity that owns sessions, the mTLS client certificate's names; in-process replays:
no identity), and a book files what it keeps under the `BookKey`: the scope and the node list
the decision saw (a cluster whose node list changes starts a new book, as a new replay does).
"""

from __future__ import annotations

from ...domain.caller_scope import CallerScope
from .problem import Problem

__all__ = ["BookKey", "CallerScope", "book_key"]


BookKey = tuple[CallerScope, tuple[str, ...]]  # the caller's scope and the node ids in order


def book_key(scope: CallerScope, problem: Problem) -> BookKey:
    """Where a book keeps what this caller's decisions on this node list leave."""
    return (scope, tuple(problem.node_ids))
