"""Keeping generation-2 garbage collections out of decisions: the long-lived heap is frozen.

Python's cyclic garbage collector now and then examines every object it tracks (a generation-2
collection). A service holding a session of 100,000 nodes and 70,000 running jobs tracks
millions of objects, so such a collection costs 0.2-0.7 s, and it falls on whichever decision
allocates at that moment: one call in a hundred or two takes several times the p99
(docs/benchmarks/decision-cost-at-scale.md §4.2). Those objects live as long as the service or
the session: the modules, the configuration, the node tables, the session's state.
`gc.freeze()` moves every object tracked so far into a permanent generation that collections
skip; objects still reclaim their memory by reference counting when released (a closed
session's state), only cyclic garbage among frozen objects is never collected.

The service freezes its heap once it has started (after a full collection) and again after
each session opens (without one: at 100,000 nodes a collection would cost the opening call
what the freeze saves the later ones). It is process-wide: a process that embeds the service
(`hpcdispatch simulate`, tests) has its own objects frozen too, which changes when memory is
reclaimed, never what is computed. docs/deployment.md, *Garbage collection*.
"""

from __future__ import annotations

import gc


def freeze_long_lived(collect: bool = False) -> None:
    """Move every object the collector tracks now into its permanent generation; `collect`:
    a full collection first (at start-up, where the heap is small)."""
    if collect:
        gc.collect()
    gc.freeze()
