"""DeviceEvent (SPEC §5, §10) on the CPU backend."""

from __future__ import annotations

import re
import threading
import time

import pytest

from max.driver import CompletionFlag, DeviceEvent, DeviceQueue

WAIT = 20.0
NOT_YET = 0.1
EVENT_RE = re.compile(r"^cpu\[0\]:event@0x[0-9a-fA-F]+$")


def test_new_event_unrecorded(cpu):
    ev = DeviceEvent(cpu)
    assert ev.is_ready() is True
    assert ev.synchronize() is None
    assert ev.synchronize(timeout=0) is None
    assert ev.device is cpu


def test_constructor_keywords(cpu):
    ev = DeviceEvent(device=cpu, enable_timing=True)
    assert ev.device is cpu
    ev2 = DeviceEvent(cpu, True)
    ev3 = DeviceEvent(cpu, enable_timing=False)
    assert ev.is_ready() and ev2.is_ready() and ev3.is_ready()


@pytest.mark.parametrize("bad", [None, 0, "cpu", object()])
def test_constructor_type_error(bad):
    with pytest.raises(TypeError):
        DeviceEvent(bad)


def test_constructor_errors(cpu):
    with pytest.raises(TypeError):
        DeviceEvent()
    with pytest.raises(TypeError):
        DeviceEvent(cpu, timing=True)
    with pytest.raises(TypeError):
        DeviceEvent(cpu.default_queue)


def test_is_ready_tracks_pending_work(queue, gate):
    f = gate(queue)
    ev = queue.record_event()
    assert ev.is_ready() is False
    with pytest.raises(TimeoutError):
        ev.synchronize(timeout=0.05)
    assert ev.is_ready() is False
    f.signal(1)
    assert ev.synchronize(timeout=WAIT) is None
    assert ev.is_ready() is True


def test_synchronize_from_other_thread(queue, gate):
    f = gate(queue)
    ev = queue.record_event()
    results = []

    def waiter():
        try:
            ev.synchronize(timeout=WAIT)
            results.append("ok")
        except Exception as exc:  # pragma: no cover - reported below
            results.append(exc)

    threads = [threading.Thread(target=waiter) for _ in range(4)]
    for t in threads:
        t.start()
    time.sleep(NOT_YET)
    assert results == []
    f.signal(1)
    for t in threads:
        t.join(WAIT)
    assert results == ["ok"] * 4


# --------------------------------------------------------------------------
# Timing


def _timed_pair(cpu, queue, enqueue, sleep_s):
    start = DeviceEvent(cpu, enable_timing=True)
    end = DeviceEvent(cpu, enable_timing=True)
    queue.record_event(start)
    enqueue(queue, lambda: time.sleep(sleep_s))
    queue.record_event(end)
    end.synchronize(timeout=WAIT)
    return start, end


def test_elapsed_time(cpu, queue, enqueue):
    start, end = _timed_pair(cpu, queue, enqueue, 0.05)
    ms = start.elapsed_time(end)
    assert type(ms) is float
    assert ms >= 45.0
    assert start.elapsed_time(end_event=end) == ms


def test_elapsed_time_same_event_is_zero(cpu, queue):
    ev = DeviceEvent(cpu, enable_timing=True)
    queue.record_event(ev)
    ev.synchronize(timeout=WAIT)
    assert ev.elapsed_time(ev) == pytest.approx(0.0, abs=1e-3)


def test_elapsed_time_timing_disabled(cpu, queue):
    timed = DeviceEvent(cpu, enable_timing=True)
    plain = DeviceEvent(cpu)
    queue.record_event(timed)
    queue.record_event(plain)
    queue.synchronize(timeout=WAIT)
    with pytest.raises(RuntimeError):
        timed.elapsed_time(plain)
    with pytest.raises(RuntimeError):
        plain.elapsed_time(timed)
    a, b = queue.record_event(), queue.record_event()
    queue.synchronize(timeout=WAIT)
    with pytest.raises(RuntimeError):
        a.elapsed_time(b)


def test_elapsed_time_unrecorded(cpu, queue):
    recorded = DeviceEvent(cpu, enable_timing=True)
    unrecorded = DeviceEvent(cpu, enable_timing=True)
    queue.record_event(recorded)
    queue.synchronize(timeout=WAIT)
    with pytest.raises(RuntimeError):
        recorded.elapsed_time(unrecorded)
    with pytest.raises(RuntimeError):
        unrecorded.elapsed_time(recorded)
    with pytest.raises(RuntimeError):
        unrecorded.elapsed_time(unrecorded)


def test_elapsed_time_not_complete(cpu, queue, gate):
    start = DeviceEvent(cpu, enable_timing=True)
    end = DeviceEvent(cpu, enable_timing=True)
    queue.record_event(start)
    f = gate(queue)
    queue.record_event(end)
    with pytest.raises(RuntimeError):
        start.elapsed_time(end)
    f.signal(1)
    end.synchronize(timeout=WAIT)
    assert start.elapsed_time(end) >= 0.0


@pytest.mark.parametrize("bad", [None, 1, "ev", object()])
def test_elapsed_time_type_error(cpu, bad):
    ev = DeviceEvent(cpu, enable_timing=True)
    with pytest.raises(TypeError):
        ev.elapsed_time(bad)


def test_elapsed_time_queue_type_error(cpu, queue):
    ev = DeviceEvent(cpu, enable_timing=True)
    with pytest.raises(TypeError):
        ev.elapsed_time(queue)
    with pytest.raises(TypeError):
        ev.elapsed_time()


# --------------------------------------------------------------------------
# Identity and text


def test_str_equals_repr_and_format(cpu, queue):
    a, b = DeviceEvent(cpu), DeviceEvent(cpu)
    assert str(a) == repr(a)
    assert EVENT_RE.match(repr(a)), repr(a)
    assert EVENT_RE.match(repr(b)), repr(b)
    assert repr(a) != repr(b)
    r = queue.record_event()
    assert EVENT_RE.match(str(r)), str(r)


def test_str_unchanged_on_rerecord(cpu, queue, gate):
    ev = DeviceEvent(cpu)
    before = str(ev)
    queue.record_event(ev)
    assert str(ev) == before
    other = DeviceQueue(cpu)
    gate(other)
    other.record_event(ev)
    assert str(ev) == before == repr(ev)


def test_eq_hash(cpu, queue):
    a, b = DeviceEvent(cpu), queue.record_event()
    assert a == a
    assert a != b
    assert hash(a) == hash(a)
    assert len({a, b, a}) == 2
    assert a != 0
    assert a != cpu
    queue.record_event(a)
    assert a == a and hash(a) == hash(a)


# --------------------------------------------------------------------------
# wait_for(event) semantics


def test_wait_for_event_uses_point_at_call_time(cpu, enqueue, rec, gate):
    gated, waiter, idle = DeviceQueue(cpu), DeviceQueue(cpu), DeviceQueue(cpu)
    f = gate(gated)
    ev = DeviceEvent(cpu)
    gated.record_event(ev)
    waiter.wait_for(event=ev)
    idle.record_event(ev)  # moving the event later must not release waiter
    ev.synchronize(timeout=WAIT)
    assert ev.is_ready()
    enqueue(waiter, rec.fn("w"))
    time.sleep(NOT_YET)
    assert not rec.has("w")
    f.signal(1)
    waiter.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["w"]


def test_wait_for_event_rerecord_later_does_not_block(cpu, enqueue, rec, gate):
    gated, waiter, idle = DeviceQueue(cpu), DeviceQueue(cpu), DeviceQueue(cpu)
    ev = DeviceEvent(cpu)
    idle.record_event(ev)
    waiter.wait_for(ev)
    gate(gated)
    gated.record_event(ev)  # the wait above was for the old (complete) point
    enqueue(waiter, rec.fn("w"))
    assert rec.wait("w", WAIT)
    assert not ev.is_ready()


def test_wait_for_event_recorded_on_same_queue(cpu, enqueue, rec):
    q = DeviceQueue(cpu)
    enqueue(q, rec.fn(1))
    ev = q.record_event()
    q.wait_for(ev)
    enqueue(q, rec.fn(2))
    q.synchronize(timeout=WAIT)
    assert rec.snapshot() == [1, 2]


def test_event_completes_after_earlier_host_work(queue, enqueue):
    release = threading.Event()
    enqueue(queue, lambda: release.wait(WAIT))
    ev = queue.record_event()
    time.sleep(NOT_YET)
    assert not ev.is_ready()
    release.set()
    ev.synchronize(timeout=WAIT)
    assert ev.is_ready()


def test_flag_signalled_gate_then_event(queue):
    f = CompletionFlag(queue.device)
    queue.wait_for_host_value(f, 1)
    ev = queue.record_event()
    assert not ev.is_ready()
    f.signal(1)
    ev.synchronize(timeout=WAIT)
    assert ev.is_ready()
