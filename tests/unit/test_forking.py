"""disq.client.forking's CallGate: what a fork (or an idle close) waits for, and what waits
for it. Threads and events, no sleeps."""

from __future__ import annotations

import threading

from disq.client.forking import CallGate

WAIT_S = 10.0  # a bound for events that must happen; never reached when the test passes


def test_a_hold_waits_for_the_call_in_flight_and_holds_new_ones() -> None:
    gate = CallGate()
    entered, leave = threading.Event(), threading.Event()
    order: list[str] = []

    def in_flight() -> None:
        with gate.call():
            entered.set()
            leave.wait(WAIT_S)
            order.append("first call ends")

    t = threading.Thread(target=in_flight)
    t.start()
    assert entered.wait(WAIT_S)
    assert not gate.hold(0.0)  # still in flight: not held clean
    gate.release()
    held = threading.Event()

    def holder() -> None:
        assert gate.hold(WAIT_S)
        order.append("held")
        held.set()

    h = threading.Thread(target=holder)
    h.start()
    leave.set()
    assert held.wait(WAIT_S)
    late_in = threading.Event()

    def late_call() -> None:
        with gate.call():
            order.append("late call runs")
            late_in.set()

    late = threading.Thread(target=late_call)
    late.start()
    assert not late_in.wait(0.05)  # held: it waits (a bounded look, not a timing claim)
    order.append("released")
    gate.release()
    assert late_in.wait(WAIT_S)
    for thread in (t, h, late):
        thread.join(WAIT_S)
    assert order == ["first call ends", "held", "released", "late call runs"]


def test_a_call_inside_a_call_is_one_call() -> None:
    """An add that refreshes the client's view makes a call inside its call: a hold waiting
    for the count to drop must not wait on it twice, and the inner call must not wait for
    a hold that waits for the outer one."""
    gate = CallGate()
    with gate.call(), gate.call():
        assert not gate.try_hold()
    assert gate.try_hold()
    gate.release()


def test_try_hold_takes_an_idle_gate_only_and_one_holder_at_a_time() -> None:
    gate = CallGate()
    assert gate.try_hold()
    assert not gate.try_hold()  # held already (an idle close in progress)
    gate.release()
    assert gate.try_hold()
    gate.release()


def test_a_forked_child_starts_with_an_open_gate() -> None:
    """In a child, the parent's other threads (and the calls they had) do not exist: the
    gate is reset even though the parent held it while forking."""
    gate = CallGate()
    assert gate.hold(0.0)
    gate.reset_in_child()
    with gate.call():
        pass
    assert gate.try_hold()
    gate.release()
