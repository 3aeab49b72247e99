"""Giving up a stage when the decision's deadline passes or its caller leaves.

Long loops (reductions, list schedules, model building) take a `StopCheck`, usually
`SearchControl.should_stop`, ask it once per job, and raise `Stopped` when it says so.
"""

from __future__ import annotations

from collections.abc import Callable

StopCheck = Callable[[], bool]


class Stopped(Exception):
    """A stage gave up: the decision's deadline passed or nobody waits for it any more."""


def never() -> bool:
    """The StopCheck of callers without a deadline (tests, benchmarks)."""
    return False


def stop_if(should_stop: StopCheck, stage: str) -> None:
    if should_stop():
        raise Stopped(stage)
