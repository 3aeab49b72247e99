"""Which session-stream messages are answered on the event loop itself, without a pool thread.

Handing a message to a pool thread (server/rpc/call_pool.py) and its answer back to the loop
costs two thread switches and a wake-up of the loop per message: on a replay's stream of EASY
decisions of a few hundred microseconds each, more than the decision itself (issue #52). A
message whose call is short is therefore answered where it was read, on the loop, when:

- its stream's recent answers of that call were short: an exponentially weighted mean of
  the longer of their CPU and wall seconds (measured wherever they ran: an answer that waits,
  on a knowledge base or a plugin, counts as long) below `INLINE_SECONDS`; a call not measured yet
  on the stream goes to a thread, so a stream's first decision, and every decision of a
  dispatcher whose decisions take longer (the CP models), keep their thread;
- and the decision machinery has room at once (`room()`: a decision thread and an admission
  slot free, nobody waiting for one), so that the loop never waits for a slot.

While a message is answered inline the loop serves nothing else, for about `INLINE_SECONDS`
of CPU at most on average: health checks and the other streams wait that long. A decision that turns
out long is measured, and its stream's next ones go to a thread again.
"""

from __future__ import annotations

from collections.abc import Callable

# A stream's mean CPU seconds per answer of a call below which it is answered on the loop.
INLINE_SECONDS = 0.005
# Weight of the newest answer in the mean.
SMOOTHING = 0.2


def always_room() -> bool:
    return True


class InlineAnswers:
    """One stream's mean answer seconds per call, and whether the next message may be answered
    on the loop (module doc)."""

    def __init__(self, room: Callable[[], bool] = always_room,
                 inline_seconds: float = INLINE_SECONDS) -> None:
        self.room = room
        self.inline_seconds = inline_seconds
        self.mean: dict[str, float] = {}  # call -> mean seconds of its answers on this stream

    def on_loop(self, call: str) -> bool:
        """Whether the next message of `call` is answered on the loop."""
        mean = self.mean.get(call)
        return mean is not None and mean < self.inline_seconds and self.room()

    def measured(self, call: str, seconds: float) -> None:
        """An answer of `call` took `seconds`."""
        old = self.mean.get(call)
        self.mean[call] = seconds if old is None else (1 - SMOOTHING) * old + SMOOTHING * seconds
