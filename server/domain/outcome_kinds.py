"""How a decision's outcome is classified: the status of a decision or of one solver attempt,
why an attempt ended, why a queued job was left waiting, and why a promise moved later.

The core and its plugins speak these; the wire's enums of the same names (SolveStatus,
AttemptEnd, SkipReason in dispatcher.proto) are made from them, and back, in one place at the
edge (`server/core_wire.py`). Their numbers are the contract's, so that a value read in a log
or a test means the same on both sides; the conversion still goes by name.
"""

from __future__ import annotations

from enum import IntEnum, unique


@unique
class SolveStatus(IntEnum):
    """How a decision (or one solver attempt) was reached."""

    OPTIMAL = 1  # proven optimal
    FEASIBLE = 2  # a solution, optimality not proven
    INFEASIBLE = 3  # proven to have no solution: jobs wait, no restart
    UNKNOWN = 4  # limit reached with no solution
    MODEL_INVALID = 5  # the model was rejected by the solver (a bug)
    HEURISTIC = 6  # decided by a heuristic (FCFS, EASY, or the CP incumbent)
    FALLBACK = 7  # the checked-safe fallback (EASY) answered
    EMPTY = 8  # nothing to decide (no queued job could enter a model)


@unique
class AttemptEnd(IntEnum):
    """Why one solver attempt ended."""

    UNSPECIFIED = 0  # not said (an attempt a plugin reports without it)
    PROOF = 1  # the solver proved optimality or infeasibility
    LIMIT = 2  # its own limit (δ, 2δ, ...: wall-clock or deterministic)
    STALL = 3  # no better solution for `stall_ms` after the last one
    DEADLINE = 4  # the decision's deadline, before its own limit
    CALLER_GONE = 5  # the caller cancelled or disconnected meanwhile


@unique
class SkipReason(IntEnum):
    """Why a queued job did not start now."""

    CANNOT_FIT_NOW = 1  # its request exceeds what is free at t (fit-now filter)
    OUTSIDE_WINDOW = 2  # lower priority than the m jobs of the window
    BLOCKED = 3  # FCFS / EASY: behind a job that could not start
    NEVER_FITS = 4  # larger than all up nodes together could ever offer


@unique
class PromiseMove(IntEnum):
    """Why a promised start moved later. A promise is computed from requested times (the limit
    at which the workload manager kills a job), so no prediction can make it late: only what no
    dispatcher controls, or a promise the caller can no longer hold the service to."""

    UNSPECIFIED = 0  # not said (a plugin's outcome without a reason)
    NODE_UNAVAILABLE = 1  # a node it was planned on went down, was drained or left the pool
    RAN_PAST_LIMIT = 2  # a running job it waits for is still running past its requested time
    SHAPE_CHANGED = 3  # its units, request or requested time changed: the promise is made anew
    OLDER_PROMISE = 4  # an older promise, learned since (e.g. from another replica), took its room
    WINDOW = 5  # an unavailability window (maintenance, a reservation) now covers its nodes
