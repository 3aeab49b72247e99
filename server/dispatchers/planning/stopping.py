"""Giving up a stage when the decision's deadline passes or its caller leaves.

Long loops (reductions, list schedules, model building) take a `StopCheck`, usually
`SearchControl.should_stop`, ask it once per job, and raise `Stopped` when it says so. Loops
whose jobs take microseconds each ask through `every_few`, which passes every few questions on:
a clock read and a gRPC call per job would cost more than the job.
"""

from __future__ import annotations

from collections.abc import Callable

StopCheck = Callable[[], bool]

# Questions of `every_few` per one passed on: a few jobs of a fast loop, tens of microseconds.
CHECK_EVERY = 8


class Stopped(Exception):
    """A stage gave up: the decision's deadline passed or nobody waits for it any more."""


def never() -> bool:
    """The StopCheck of callers without a deadline (tests, benchmarks)."""
    return False


def stop_if(should_stop: StopCheck, stage: str) -> None:
    if should_stop():
        raise Stopped(stage)


def every_few(should_stop: StopCheck, calls: int = CHECK_EVERY) -> StopCheck:
    """`should_stop`, asked at the first call and then at every `calls`-th one (False in
    between), for a loop that asks once per job."""
    if should_stop is never:
        return never
    skip = 0

    def check() -> bool:
        nonlocal skip
        if skip:
            skip -= 1
            return False
        skip = calls - 1
        return should_stop()

    return check
