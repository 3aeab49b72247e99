"""Decision threads: how many decisions may be in progress or waiting for a slot at once, and
how many of them one client identity may hold.

A decision thread is a ticket, not a thread of its own: the decision runs in its call's pool
thread (server/rpc/call_pool.py) and holds a ticket from before admission until it is
answered. There are `workers - 1` of them, so that one pool thread is always left for the calls
that do not decide (completion reports, DescribeService, closing sessions). A call that finds
none free is refused at once (RESOURCE_EXHAUSTED): it would otherwise wait without a deadline
check behind decisions that may take a minute.

One identity (its mTLS client certificate's names, tls.caller_identity) may hold at most its
share, so that a caller that keeps every thread busy leaves the others some.
"""

from __future__ import annotations

import threading
from collections import Counter

from ..config import ServerConfig

# Why a ticket was refused (hpcdispatch_decisions_refused_total's reason).
ALL_TAKEN = "threads"
SHARE_TAKEN = "share"


def identity_share(config: ServerConfig, threads: int) -> int:
    """Decision threads one identity may hold: max_decisions_per_identity when set; else all
    but one when callers have client certificates (tls_client_ca), all of them without (every
    caller is then the same identity)."""
    if config.max_decisions_per_identity:
        return min(config.max_decisions_per_identity, threads)
    if config.tls_client_ca:
        return max(1, threads - 1)
    return threads


class DecisionThreads:
    """`total` tickets, at most `per_identity` of them held by one identity at once."""

    def __init__(self, total: int, per_identity: int) -> None:
        if not 1 <= per_identity <= total:
            raise ValueError(f"a share of {per_identity} of {total} decision threads")
        self.total = total
        self.per_identity = per_identity
        self._held: Counter[str] = Counter()
        self._lock = threading.Lock()

    @property
    def free(self) -> int:
        with self._lock:
            return self.total - self._held.total()

    def held_by(self, identity: str) -> int:
        with self._lock:
            return self._held[identity]

    def take(self, identity: str) -> str | None:
        """Take a ticket for `identity`: None when taken, else why not (ALL_TAKEN, SHARE_TAKEN)."""
        with self._lock:
            if self._held.total() >= self.total:
                return ALL_TAKEN
            if self._held[identity] >= self.per_identity:
                return SHARE_TAKEN
            self._held[identity] += 1
            return None

    def give_back(self, identity: str) -> None:
        with self._lock:
            self._held[identity] -= 1
            if self._held[identity] <= 0:
                del self._held[identity]
