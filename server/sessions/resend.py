"""What makes an UpdateSession safe to send again: the delta that gave the session its current
sequence number, remembered with its answer.

An UpdateSession applies its delta whole or not at all: the delta is checked, and a deciding
call granted its decision slot, before the state changes, and applying never fails. Once it is
applied, the call may still end in an error (its deadline passes or its caller leaves during
the decision) or its answer may be lost on the way back; the caller cannot tell. So it sends
the same request again, and that resend is not applied a second time: it is answered with the
answer given (`answer`), or, when the first call ended before answering, with a decision on
the session's state, which is still the state that delta made (no later delta was applied: it
would have taken the next number). Only the latest delta is remembered; a different delta
under its number is a sequence gap, as any number the session has moved past.

The session keeps the delta's digest and its answer as the edge made them (the request's
digest is `intake/session_delta.py`'s `delta_digest`; the answer is the edge's message, which
the session holds without reading it: no wire here).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from ..intake.decision_options import DecisionOptions

Answer = TypeVar("Answer")


@dataclass(slots=True)
class LastDelta(Generic[Answer]):
    """The delta that made the session's current sequence number."""

    sequence: int
    digest: bytes  # the digest of its request
    options: DecisionOptions | None  # its decision's options; None when it did not decide
    # What its call answered; None while it has not answered (it may still be deciding, or
    # it ended in an error after applying the delta).
    answer: Answer | None = None

    def repeated_by(self, sequence: int, digest: Callable[[], bytes]) -> bool:
        """The delta numbered `sequence` whose request's digest is `digest()` is this delta
        sent again (same number, same content; the digest is made only for the same number)."""
        return sequence == self.sequence and digest() == self.digest
