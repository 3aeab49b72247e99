"""Decision threads: how many decisions may be in progress or waiting for a slot at once, how
many of them one client identity may hold, and the reserve that keeps one for every identity.

A decision thread is a ticket, not a thread of its own: the decision runs in its call's pool
thread (server/rpc/call_pool.py) and holds a ticket from before admission until it is
answered. There are `workers - 1` shared ones, so that one pool thread is always left for the
calls that do not decide (completion reports, DescribeService, closing sessions). A call that
finds none it may take is refused at once (RESOURCE_EXHAUSTED): it would otherwise wait without
a deadline check behind decisions that may take a minute.

Fairness across identities (max-min: nobody gets more while somebody holding less is refused):

- one identity (its mTLS client certificate's names, tls.caller_identity) holds at most its
  share of the shared tickets, so that a caller that keeps every thread busy leaves the
  others some;
- an identity that holds no ticket while the shared ones are all taken (by any set of other
  identities, each within its share) gets one of the `reserve` tickets: one for each identity
  beyond the shared ones, never a second. The call pool has a thread for each of them, so the
  one left for the calls that do not decide stays free. Only `reserve` identities at once can
  hold one: as long as fewer than `workers - 1 + reserve` identities decide at once, none of
  them is ever refused its first decision because of what the others hold.
"""

from __future__ import annotations

import threading
from collections import Counter

from ..config import ServerConfig

# Why a ticket was refused (hpcdispatch_decisions_refused_total's reason).
ALL_TAKEN = "threads"
SHARE_TAKEN = "share"


def identity_share(config: ServerConfig, threads: int) -> int:
    """Shared decision threads one identity may hold: max_decisions_per_identity when set; else
    all but one when callers have client certificates (tls_client_ca), all of them without
    (every caller is then the same identity)."""
    if config.max_decisions_per_identity:
        return min(config.max_decisions_per_identity, threads)
    if config.tls_client_ca:
        return max(1, threads - 1)
    return threads


def identity_reserve(config: ServerConfig) -> int:
    """Reserve tickets, one each for an identity holding none while the shared ones are all
    taken: identity_reserve with client certificates; none without (every caller is then one
    identity, which holds none only when every shared ticket is free)."""
    return config.identity_reserve if config.tls_client_ca else 0


class DecisionThreads:
    """`total` shared tickets, at most `per_identity` of them held by one identity at once, and
    `reserve` more, one each for an identity holding none when the shared are all taken."""

    def __init__(self, total: int, per_identity: int, reserve: int = 0) -> None:
        if not 1 <= per_identity <= total:
            raise ValueError(f"a share of {per_identity} of {total} decision threads")
        if reserve < 0:
            raise ValueError(f"a reserve of {reserve} decision threads")
        self.total = total
        self.per_identity = per_identity
        self.reserve = reserve
        self._held: Counter[str] = Counter()  # shared tickets, by identity
        self._reserved: set[str] = set()  # identities holding a reserve ticket
        self._lock = threading.Lock()

    @property
    def free(self) -> int:
        """Shared tickets free."""
        with self._lock:
            return self.total - self._held.total()

    @property
    def reserve_free(self) -> int:
        with self._lock:
            return self.reserve - len(self._reserved)

    def admitting_newcomer(self) -> bool:
        """Whether an identity holding no ticket would get one now (a shared or a reserve one):
        the service as a whole still admits."""
        with self._lock:
            return self._held.total() < self.total or len(self._reserved) < self.reserve

    def held_by(self, identity: str) -> int:
        with self._lock:
            return self._held[identity] + (identity in self._reserved)

    def take(self, identity: str) -> str | None:
        """Take a ticket for `identity`: None when taken, else why not (ALL_TAKEN, SHARE_TAKEN)."""
        with self._lock:
            holds = self._held[identity] + (identity in self._reserved)
            if self._held.total() >= self.total:
                if holds == 0 and len(self._reserved) < self.reserve:
                    self._reserved.add(identity)
                    return None
                return ALL_TAKEN
            if holds >= self.per_identity:
                return SHARE_TAKEN
            self._held[identity] += 1
            return None

    def give_back(self, identity: str) -> None:
        """Give back one of `identity`'s tickets (its reserve one first: a shared ticket freed
        now serves whoever comes next)."""
        with self._lock:
            if identity in self._reserved:
                self._reserved.discard(identity)
                return
            self._held[identity] -= 1
            if self._held[identity] <= 0:
                del self._held[identity]
