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
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from hpcdispatch.v1 import dispatcher_pb2 as pb

from ..intake.decision_options import DecisionOptions


def delta_digest(request: pb.UpdateSessionRequest) -> bytes:
    """A digest of the whole request: a resend repeats it field for field (map entries in any
    order: deterministic serialisation sorts them)."""
    return hashlib.blake2b(request.SerializeToString(deterministic=True),
                           digest_size=16).digest()


@dataclass(slots=True)
class LastDelta:
    """The delta that made the session's current sequence number."""

    sequence: int
    digest: bytes  # delta_digest of its request
    options: DecisionOptions | None  # its decision's options; None when it did not decide
    # What its call answered; None while it has not answered (it may still be deciding, or
    # it ended in an error after applying the delta).
    answer: pb.UpdateSessionResponse | None = None

    def repeated_by(self, request: pb.UpdateSessionRequest) -> bool:
        """`request` is this delta sent again (same number, same content)."""
        return request.sequence == self.sequence and delta_digest(request) == self.digest
