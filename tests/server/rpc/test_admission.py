"""Admission control: slots, waiting bounded by each request's deadline (first come, first served
within an identity, max-min fair between identities), measured cost per (dispatcher, profile)
fading with time."""

from __future__ import annotations

import threading
import time

import pytest

from hpcdispatch.server.rpc.admission import CostBook, CostKey, DecisionAdmission, Refused

EASY, PCP20 = (2, "qos"), (5, "qos")  # (dispatcher kind, profile)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _never() -> bool:
    return False


def _enter_in_thread(
    admission: DecisionAdmission, kind: CostKey, deadline: float, log: list[str], label: str,
    cancelled: threading.Event | None = None, identity: str = "",
) -> threading.Thread:
    def run() -> None:
        try:
            admitted = admission.enter(kind, deadline,
                                       cancelled.is_set if cancelled else _never, identity)
        except Refused as refused:
            log.append(f"{label}: refused{' (cancelled)' if refused.cancelled else ''}")
            return
        log.append(f"{label}: in")
        admission.leave(admitted)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _wait_until(condition: object, seconds: float = 60.0) -> None:
    end = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < end, "condition not reached"
        time.sleep(0.005)


def test_slots_bound_the_decisions_at_once_and_waiters_go_in_arrival_order() -> None:
    admission = DecisionAdmission(slots=2)
    far = time.monotonic() + 60
    first, second = admission.enter(EASY, far, _never), admission.enter(EASY, far, _never)
    log: list[str] = []
    waiters = []
    for label in ("a", "b", "c"):
        waiters.append(_enter_in_thread(admission, EASY, far, log, label))
        count = len(waiters)
        _wait_until(lambda count=count: admission.waiting == count)
    assert log == [] and admission.busy == 2
    admission.leave(first)
    admission.leave(second)
    for w in waiters:
        w.join(60)
    assert log == ["a: in", "b: in", "c: in"]
    assert admission.busy == 0 and admission.waiting == 0


def test_a_request_that_cannot_be_ready_by_its_deadline_is_refused_at_once() -> None:
    admission = DecisionAdmission(slots=1)
    far = time.monotonic() + 60
    held = admission.enter(PCP20, far, _never)
    time.sleep(0.2)
    admission.leave(held)  # PCP'20 decisions now cost ~0.2 s
    assert admission.cost(*PCP20) >= 0.15
    held = admission.enter(PCP20, far, _never)
    # Refused on arrival, by the estimate, without joining the queue (a request refused after
    # waiting says how long it waited instead).
    with pytest.raises(Refused, match="would not leave this one its") as refused:
        admission.enter(PCP20, time.monotonic() + 0.1, _never)
    assert "waited" not in str(refused.value)
    assert admission.waiting == 0
    admission.leave(held)


def test_a_waiting_request_leaves_once_its_deadline_no_longer_leaves_time() -> None:
    admission = DecisionAdmission(slots=1)
    held = admission.enter(EASY, time.monotonic() + 60, _never)
    log: list[str] = []
    waiter = _enter_in_thread(admission, EASY, time.monotonic() + 0.3, log, "late")
    waiter.join(60)
    assert log == ["late: refused"]
    assert admission.waiting == 0
    admission.leave(held)


def test_a_waiting_request_whose_caller_left_leaves_the_queue() -> None:
    admission = DecisionAdmission(slots=1)
    held = admission.enter(EASY, time.monotonic() + 60, _never)
    log: list[str] = []
    gone = threading.Event()
    waiter = _enter_in_thread(admission, EASY, time.monotonic() + 60, log, "x", gone)
    _wait_until(lambda: admission.waiting == 1)
    gone.set()
    waiter.join(60)
    assert log == ["x: refused (cancelled)"]
    admission.leave(held)


def test_a_request_behind_one_that_left_is_not_blocked_by_it() -> None:
    admission = DecisionAdmission(slots=1)
    held = admission.enter(EASY, time.monotonic() + 60, _never)
    log: list[str] = []
    gone = threading.Event()
    first = _enter_in_thread(admission, EASY, time.monotonic() + 60, log, "gone", gone)
    _wait_until(lambda: admission.waiting == 1)
    second = _enter_in_thread(admission, EASY, time.monotonic() + 60, log, "next")
    _wait_until(lambda: admission.waiting == 2)
    gone.set()
    first.join(60)
    admission.leave(held)
    second.join(60)
    assert log == ["gone: refused (cancelled)", "next: in"]


def test_an_abandoned_decision_does_not_lower_the_measured_cost() -> None:
    admission = DecisionAdmission(slots=1, costs=CostBook(FakeClock()))  # no fading meanwhile
    held = admission.enter(EASY, time.monotonic() + 60, _never)
    time.sleep(0.1)
    admission.leave(held)
    cost = admission.cost(*EASY)
    admission.leave(admission.enter(EASY, time.monotonic() + 60, _never), measure=False)
    assert admission.cost(*EASY) == cost


def test_slots_must_be_positive() -> None:
    with pytest.raises(ValueError, match="slots"):
        DecisionAdmission(0)


def test_an_identity_running_no_decision_starts_one_beside_busy_slots() -> None:
    # Bob's decision holds the only slot; Carol's first runs at once (its own slot), her
    # second waits like Bob's second, and each goes in once its identity runs none again.
    admission = DecisionAdmission(slots=1)
    far = time.monotonic() + 60
    bob = admission.enter(EASY, far, _never, "bob")
    log: list[str] = []
    bobs = _enter_in_thread(admission, EASY, far, log, "bob 2", identity="bob")
    _wait_until(lambda: admission.waiting == 1)
    carol = admission.enter(EASY, far, _never, "carol")
    assert admission.busy == 2 and admission.waiting == 1
    carols = _enter_in_thread(admission, EASY, far, log, "carol 2", identity="carol")
    _wait_until(lambda: admission.waiting == 2)
    admission.leave(carol)  # Carol runs none again: her waiting one takes its own slot
    carols.join(60)
    assert log == ["carol 2: in"]
    admission.leave(bob)
    bobs.join(60)
    assert log == ["carol 2: in", "bob 2: in"] and admission.busy == 0


def test_a_freed_slot_goes_to_the_identity_running_fewest_not_to_the_earliest() -> None:
    admission = DecisionAdmission(slots=4)
    far = time.monotonic() + 60
    bobs = [admission.enter(EASY, far, _never, "bob") for _ in range(3)]
    carol = admission.enter(EASY, far, _never, "carol")
    log: list[str] = []
    waiters = [_enter_in_thread(admission, EASY, far, log, "bob 4", identity="bob")]
    _wait_until(lambda: admission.waiting == 1)
    waiters.append(_enter_in_thread(admission, EASY, far, log, "carol 2", identity="carol"))
    _wait_until(lambda: admission.waiting == 2)
    admission.leave(bobs.pop())  # a slot frees: Carol runs 1, Bob 2
    for w in waiters:
        w.join(60)
    assert log == ["carol 2: in", "bob 4: in"]
    for held in (*bobs, carol):
        admission.leave(held)


def test_the_cost_is_kept_per_dispatcher_and_profile_and_fades_with_time() -> None:
    clock = FakeClock()
    costs = CostBook(clock, half_life=60.0)
    costs.record((5, "book"), 30.0)
    assert costs.estimate((5, "book")) == 30.0 and costs.estimate((5, "qos")) == 0.0
    clock.now = 60.0
    assert costs.estimate((5, "book")) == pytest.approx(15.0)  # one half-life later
    costs.record((5, "book"), 1.0)  # the faded mean, then the new measurement weighed in
    assert costs.estimate((5, "book")) == pytest.approx(0.8 * 15.0 + 0.2 * 1.0)
    clock.now = 60.0 + 600.0
    assert costs.estimate((5, "book")) < 0.02


def test_a_request_a_free_slot_can_serve_is_never_refused_for_its_cost() -> None:
    clock = FakeClock()
    admission = DecisionAdmission(slots=1, costs=CostBook(clock))
    admission.costs.record(PCP20, 30.0)  # one slow decision
    soon = time.monotonic() + 5
    admission.leave(admission.enter(PCP20, soon, _never))  # idle: admitted, 5 s or not
    held = admission.enter(EASY, time.monotonic() + 60, _never)
    with pytest.raises(Refused, match="would not leave this one"):
        admission.enter(PCP20, time.monotonic() + 5, _never)  # it would have to wait
    clock.now += 20 * 60.0  # twenty half-lives without a PCP'20 decision
    log: list[str] = []
    waiter = _enter_in_thread(admission, PCP20, time.monotonic() + 60, log, "later")
    _wait_until(lambda: admission.waiting == 1)
    admission.leave(held)
    waiter.join(60)
    assert log == ["later: in"]
