"""DeviceEvent on an accelerator (SPEC §5, §10)."""

from __future__ import annotations

import re
import threading
import time

import pytest
from accel_support import ENQ, NOT_YET, WAIT

from max.driver import CPU, CompletionFlag, DeviceEvent, DeviceQueue


def _enq(target, fn):
    return getattr(target, ENQ)(fn)


def test_new_event_unrecorded(acc):
    ev = DeviceEvent(acc)
    assert ev.device is acc
    assert ev.is_ready() is True
    assert ev.synchronize() is None
    assert ev.synchronize(timeout=0) is None


def test_constructor_keywords(acc):
    ev = DeviceEvent(device=acc, enable_timing=True)
    assert ev.device is acc
    assert ev.is_ready()
    assert DeviceEvent(acc, False).is_ready()


def test_event_on_second_device(acc1):
    ev = DeviceEvent(acc1)
    assert ev.device is acc1
    q = DeviceQueue(acc1)
    q.record_event(ev)
    ev.synchronize(timeout=WAIT)
    assert ev.is_ready()


@pytest.mark.parametrize("bad", [None, 0, "gpu", object()])
def test_constructor_type_error(bad):
    with pytest.raises(TypeError):
        DeviceEvent(bad)


def test_is_ready_tracks_pending_work(aq):
    f = CompletionFlag(aq.device)
    aq.wait_for_host_value(f, 1)
    ev = aq.record_event()
    try:
        assert ev.is_ready() is False
        time.sleep(NOT_YET)
        assert ev.is_ready() is False
        with pytest.raises(TimeoutError):
            ev.synchronize(timeout=0.05)
    finally:
        f.signal(1)
    assert ev.synchronize(timeout=WAIT) is None
    assert ev.is_ready() is True


def test_record_existing_event_both_overloads(acc, aq, gate):
    ev = DeviceEvent(acc)
    f = gate(aq)
    aq.record_event(ev)
    assert ev.is_ready() is False
    f.signal(1)
    ev.synchronize(timeout=WAIT)
    assert ev.is_ready()
    ev2 = aq.record_event()
    ev2.synchronize(timeout=WAIT)
    assert ev2.is_ready()


def test_rerecord_moves_the_event(acc, gate):
    gated, idle = DeviceQueue(acc), DeviceQueue(acc)
    f = gate(gated)
    ev = DeviceEvent(acc)
    gated.record_event(ev)
    assert not ev.is_ready()
    idle.record_event(ev)  # moves to a point that completes at once
    ev.synchronize(timeout=WAIT)
    assert ev.is_ready()
    gated.record_event(ev)  # and back behind the gate
    assert not ev.is_ready()
    f.signal(1)
    ev.synchronize(timeout=WAIT)
    assert ev.is_ready()


def test_event_completes_after_earlier_host_work(aq, rec):
    release = threading.Event()
    _enq(aq, lambda: (release.wait(WAIT), rec.add("host")))
    ev = aq.record_event()
    try:
        time.sleep(NOT_YET)
        assert not ev.is_ready()
    finally:
        release.set()
    ev.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["host"]


def test_synchronize_from_other_thread(aq, gate):
    f = gate(aq)
    ev = aq.record_event()
    results = []

    def waiter():
        try:
            ev.synchronize(timeout=WAIT)
            results.append("ok")
        except Exception as exc:  # pragma: no cover - reported below
            results.append(repr(exc))

    t = threading.Thread(target=waiter)
    t.start()
    time.sleep(NOT_YET)
    assert results == []
    f.signal(1)
    t.join(WAIT)
    assert results == ["ok"]


# --------------------------------------------------------------------------
# elapsed_time


def test_elapsed_time_around_sleeping_host_function(acc, aq):
    start = DeviceEvent(acc, enable_timing=True)
    end = DeviceEvent(acc, enable_timing=True)
    aq.record_event(start)
    _enq(aq, lambda: time.sleep(0.05))
    aq.record_event(end)
    end.synchronize(timeout=WAIT)
    ms = start.elapsed_time(end)
    assert type(ms) is float
    # The 50 ms host function lies between the two points (small slack for
    # timer granularity); an upper bound only guards against unit errors.
    assert 45.0 <= ms < 60_000.0, ms
    assert start.elapsed_time(end_event=end) == ms


def test_elapsed_time_same_event(acc, aq):
    ev = DeviceEvent(acc, enable_timing=True)
    aq.record_event(ev)
    ev.synchronize(timeout=WAIT)
    assert ev.elapsed_time(ev) == 0.0


def test_elapsed_time_across_queues_of_a_device(acc):
    q1, q2 = DeviceQueue(acc), DeviceQueue(acc)
    a = DeviceEvent(acc, enable_timing=True)
    b = DeviceEvent(acc, enable_timing=True)
    q1.record_event(a)
    q1.synchronize(timeout=WAIT)
    time.sleep(0.02)
    q2.record_event(b)
    b.synchronize(timeout=WAIT)
    assert type(a.elapsed_time(b)) is float


def test_elapsed_time_across_devices_runtime_error(acc, acc1):
    """SPEC §5: a pair that cannot be timed is a RuntimeError with the
    reason, not the driver's invalid-handle error."""
    a = DeviceEvent(acc, enable_timing=True)
    b = DeviceEvent(acc1, enable_timing=True)
    DeviceQueue(acc).record_event(a)
    DeviceQueue(acc1).record_event(b)
    a.synchronize(timeout=WAIT)
    b.synchronize(timeout=WAIT)
    for x, y in ((a, b), (b, a)):
        with pytest.raises(RuntimeError, match="different devices"):
            x.elapsed_time(y)


def test_elapsed_time_racing_a_re_record(acc, aq):
    """Another thread re-records the end event, behind a short host function
    each time, while this one times the pair: whenever the end event is not
    complete (when checked, or by the time the driver is asked) the answer
    is a RuntimeError, never the driver's ValueError."""
    a = DeviceEvent(acc, enable_timing=True)
    b = DeviceEvent(acc, enable_timing=True)
    aq.record_event(a)
    aq.record_event(b)
    aq.synchronize(timeout=WAIT)
    done = threading.Event()

    def re_record():
        for _ in range(300):
            getattr(aq, ENQ)(lambda: time.sleep(0.0002))
            aq.record_event(b)
        done.set()

    t = threading.Thread(target=re_record)
    t.start()
    errors = set()
    try:
        while not done.is_set():
            try:
                assert a.elapsed_time(b) >= 0.0
            except RuntimeError:
                errors.add("RuntimeError")
    finally:
        t.join()
    aq.synchronize(timeout=WAIT)
    assert errors <= {"RuntimeError"}


def test_elapsed_time_timing_disabled(acc, aq):
    timed = DeviceEvent(acc, enable_timing=True)
    untimed = DeviceEvent(acc)
    aq.record_event(timed)
    aq.record_event(untimed)
    implicit = aq.record_event()  # overload 1: timing disabled
    aq.synchronize(timeout=WAIT)
    for a, b in (
        (timed, untimed),
        (untimed, timed),
        (timed, implicit),
        (implicit, timed),
    ):
        with pytest.raises(RuntimeError) as exc:
            a.elapsed_time(b)
        assert str(exc.value)


def test_elapsed_time_unrecorded(acc, aq):
    recorded = DeviceEvent(acc, enable_timing=True)
    unrecorded = DeviceEvent(acc, enable_timing=True)
    aq.record_event(recorded)
    aq.synchronize(timeout=WAIT)
    with pytest.raises(RuntimeError) as exc:
        recorded.elapsed_time(unrecorded)
    assert str(exc.value)
    with pytest.raises(RuntimeError):
        unrecorded.elapsed_time(recorded)
    with pytest.raises(RuntimeError):
        unrecorded.elapsed_time(unrecorded)


def test_elapsed_time_not_complete(acc, aq, gate):
    a = DeviceEvent(acc, enable_timing=True)
    b = DeviceEvent(acc, enable_timing=True)
    aq.record_event(a)
    f = gate(aq)
    aq.record_event(b)
    with pytest.raises(RuntimeError) as exc:
        a.elapsed_time(b)
    assert str(exc.value)
    f.signal(1)
    b.synchronize(timeout=WAIT)
    assert a.elapsed_time(b) >= 0.0


@pytest.mark.parametrize("bad", [None, 0, "ev", object()])
def test_elapsed_time_type_error(acc, bad):
    with pytest.raises(TypeError):
        DeviceEvent(acc, enable_timing=True).elapsed_time(bad)


# --------------------------------------------------------------------------
# Text, equality


def test_str_equals_repr_and_format(acc, aq, api):
    a, b = DeviceEvent(acc), aq.record_event()
    pattern = re.compile(rf"^{api}\[0\]:event@0x[0-9a-fA-F]+$")
    for ev in (a, b):
        assert str(ev) == repr(ev)
        assert pattern.match(repr(ev)), repr(ev)
    assert repr(a) != repr(b)


def test_str_second_device(acc1, api):
    ev = DeviceEvent(acc1)
    assert re.match(rf"^{api}\[1\]:event@0x[0-9a-fA-F]+$", str(ev)), str(ev)


def test_str_unchanged_on_rerecord(acc, aq):
    ev = DeviceEvent(acc)
    before = str(ev)
    aq.record_event(ev)
    aq.record_event(ev)
    ev.synchronize(timeout=WAIT)
    assert str(ev) == before


def test_eq_hash(acc, aq):
    a, b = DeviceEvent(acc), DeviceEvent(acc)
    assert a == a and a != b
    assert hash(a) == hash(a)
    assert len({a, b, a}) == 2
    assert a != DeviceEvent(CPU())
    assert a != aq


# --------------------------------------------------------------------------
# wait_for(event) semantics


def test_wait_for_event_uses_point_at_call_time(acc, rec, gate):
    src, waiting, idle = DeviceQueue(acc), DeviceQueue(acc), DeviceQueue(acc)
    f = gate(src)
    _enq(src, rec.fn("src"))
    ev = src.record_event()
    waiting.wait_for(ev)
    idle.record_event(ev)  # re-recording later does not change the wait
    _enq(waiting, rec.fn("waiting"))
    time.sleep(NOT_YET)
    assert not rec.has("waiting")
    f.signal(1)
    waiting.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["src", "waiting"]


def test_wait_for_event_rerecord_later_does_not_block(acc, rec, gate):
    src, waiting = DeviceQueue(acc), DeviceQueue(acc)
    ev = src.record_event()
    ev.synchronize(timeout=WAIT)
    waiting.wait_for(ev)
    gate(src)
    src.record_event(ev)  # now behind a gate; the earlier wait must not see it
    _enq(waiting, rec.fn("waiting"))
    waiting.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["waiting"]


def test_wait_for_event_of_other_device(acc, acc1, rec, gate):
    q0, q1 = DeviceQueue(acc), DeviceQueue(acc1)
    f = gate(q0)
    ev = DeviceEvent(acc)
    q0.record_event(ev)
    q1.wait_for(event=ev)
    _enq(q1, rec.fn("q1"))
    time.sleep(NOT_YET)
    assert not rec.has("q1")
    f.signal(1)
    q1.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["q1"]


def test_event_outlives_its_queue(acc):
    q = DeviceQueue(acc)
    f = CompletionFlag(acc)
    q.wait_for_host_value(f, 1)
    ev = q.record_event()
    del q
    import gc

    gc.collect()
    try:
        assert not ev.is_ready()
    finally:
        f.signal(1)
    ev.synchronize(timeout=WAIT)
    assert ev.is_ready()


def test_many_events(acc, aq):
    evs = [aq.record_event() for _ in range(500)]
    evs[-1].synchronize(timeout=WAIT)
    assert all(ev.is_ready() for ev in evs)
    assert len(set(evs)) == 500
