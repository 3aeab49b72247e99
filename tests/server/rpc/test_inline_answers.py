"""Which session-stream messages are answered on the event loop (issue #52): a call is answered
there only once its stream has measured it short, and only while a decision would get its
thread and slot at once; a long answer sends the stream's next ones back to a thread. The
measurements are given, so no verdict depends on the machine's speed."""

from __future__ import annotations

from hpcdispatch.server.rpc.inline_answers import INLINE_SECONDS, InlineAnswers


def test_a_call_not_measured_yet_goes_to_a_thread() -> None:
    inline = InlineAnswers()
    assert not inline.on_loop("update")
    inline.measured("update", INLINE_SECONDS / 10)
    assert inline.on_loop("update")
    assert not inline.on_loop("report_completions")  # each call is measured on its own


def test_a_long_answer_sends_the_next_ones_to_a_thread_until_the_mean_is_short_again() -> None:
    inline = InlineAnswers()
    inline.measured("update", INLINE_SECONDS / 10)
    inline.measured("update", 100 * INLINE_SECONDS)  # e.g. a CP decision
    assert not inline.on_loop("update")
    for _ in range(60):
        inline.measured("update", INLINE_SECONDS / 10)
    assert inline.on_loop("update")


def test_no_room_for_a_decision_means_a_thread() -> None:
    room = [False]
    inline = InlineAnswers(lambda: room[0])
    inline.measured("update", INLINE_SECONDS / 10)
    assert not inline.on_loop("update")
    room[0] = True
    assert inline.on_loop("update")
