"""DeviceQueue on an accelerator (SPEC §4, §10): streams, ordering, waits
across queues and devices, host-value gates."""

from __future__ import annotations

import gc
import re
import threading
import time

import pytest
from accel_support import ENQ, NOT_YET, WAIT

from max import driver
from max.driver import CPU, CompletionFlag, DeviceEvent, DeviceQueue

# Values of CU_STREAM_LEGACY / CU_STREAM_PER_THREAD (and hipStreamPerThread):
# special handles that are not streams of their own.
SPECIAL_STREAMS = {0, 1, 2}


def _enq(target, fn):
    return getattr(target, ENQ)(fn)


def _not_run_yet(rec, item):
    time.sleep(NOT_YET)
    return not rec.has(item)


# --------------------------------------------------------------------------
# Construction, identity, text


def test_new_queue(acc):
    q = DeviceQueue(acc)
    assert isinstance(q, DeviceQueue)
    assert q.device is acc
    assert q != acc.default_queue
    q2 = DeviceQueue(device=acc)
    assert q2.device is acc
    assert q2 != q


def test_new_queue_on_second_device(acc1):
    q = DeviceQueue(acc1)
    assert q.device is acc1
    assert q != acc1.default_queue


@pytest.mark.parametrize("bad", [None, 0, "gpu", object()])
def test_new_queue_type_error(bad):
    with pytest.raises(TypeError):
        DeviceQueue(bad)


def test_native_stream_handle(acc):
    qs = [DeviceQueue(acc) for _ in range(8)]
    handles = [q.native_stream_handle for q in qs]
    default = acc.default_queue.native_stream_handle
    for h in handles + [default]:
        assert type(h) is int
        assert h not in SPECIAL_STREAMS  # never the legacy NULL stream
    assert len(set(handles + [default])) == len(handles) + 1
    # Stable for the life of the queue.
    assert [q.native_stream_handle for q in qs] == handles
    assert acc.default_queue.native_stream_handle == default


def test_native_stream_handles_differ_across_devices(acc, acc1):
    # Keep the queues alive: a dropped queue's stream handle may be reused.
    queues = [
        acc.default_queue,
        acc1.default_queue,
        DeviceQueue(acc),
        DeviceQueue(acc1),
    ]
    hs = {q.native_stream_handle for q in queues}
    assert len(hs) == 4
    assert not hs & SPECIAL_STREAMS


def test_cuda_stream_protocol(acc, api):
    q = DeviceQueue(acc)
    for queue in (q, acc.default_queue):
        if api == "cuda":
            assert hasattr(queue, "__cuda_stream__")
            assert queue.__cuda_stream__() == (0, queue.native_stream_handle)
            version, handle = queue.__cuda_stream__()
            assert type(version) is int and type(handle) is int
        else:
            assert not hasattr(queue, "__cuda_stream__")
    # Never on CPU queues, whatever the accelerator backend.
    assert not hasattr(DeviceQueue(CPU()), "__cuda_stream__")


def test_eq_hash(acc):
    a, b = DeviceQueue(acc), DeviceQueue(acc)
    assert a == a
    assert a != b
    assert hash(a) == hash(a)
    assert len({a, b, a, acc.default_queue, acc.default_queue}) == 3
    assert a != acc
    assert a != DeviceQueue(CPU())


def test_repr(acc, api):
    queue_re = re.compile(rf"^{api}\[0\]:queue@0x[0-9a-fA-F]+$")
    default_re = re.compile(rf"^{api}\[0\]:queue@0x[0-9a-fA-F]+ \(default\)$")
    a, b = DeviceQueue(acc), DeviceQueue(acc)
    assert queue_re.match(repr(a)), repr(a)
    assert queue_re.match(repr(b)), repr(b)
    assert repr(a) != repr(b)
    assert default_re.match(repr(acc.default_queue)), repr(acc.default_queue)


def test_repr_second_device(acc1, api):
    q = DeviceQueue(acc1)
    assert re.match(rf"^{api}\[1\]:queue@0x[0-9a-fA-F]+$", repr(q)), repr(q)
    assert re.match(
        rf"^{api}\[1\]:queue@0x[0-9a-fA-F]+ \(default\)$", repr(acc1.default_queue)
    ), repr(acc1.default_queue)


def test_device_context_ptr(acc):
    a, b = DeviceQueue(acc), DeviceQueue(acc)
    ptrs = [
        a._device_context_ptr(),
        b._device_context_ptr(),
        acc.default_queue._device_context_ptr(),
    ]
    assert all(type(p) is int and p != 0 for p in ptrs)
    assert len(set(ptrs)) == 3
    assert a._device_context_ptr() == ptrs[0]


# --------------------------------------------------------------------------
# Ordering


def test_in_order_on_one_queue(aq, rec):
    for i in range(200):
        _enq(aq, rec.fn(i))
    aq.synchronize(timeout=WAIT)
    assert rec.snapshot() == list(range(200))


def test_in_order_on_default_queue_via_device(acc, rec):
    for i in range(50):
        _enq(acc, rec.fn(("dev", i)))
        _enq(acc.default_queue, rec.fn(("q", i)))
    acc.default_queue.synchronize(timeout=WAIT)
    expected = []
    for i in range(50):
        expected += [("dev", i), ("q", i)]
    assert rec.snapshot() == expected


def test_queues_are_independent(acc, rec, gate):
    """A gated queue does not hold back another queue of the same device
    (non-blocking streams never synchronize implicitly)."""
    q1, q2 = DeviceQueue(acc), DeviceQueue(acc)
    f = gate(q1)
    _enq(q1, rec.fn("q1"))
    _enq(q2, rec.fn("q2"))
    q2.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["q2"]
    f.signal(1)
    q1.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["q2", "q1"]


def test_default_queue_does_not_sync_with_others(acc, rec, gate):
    q = DeviceQueue(acc)
    f = gate(acc.default_queue)
    _enq(acc.default_queue, rec.fn("default"))
    _enq(q, rec.fn("q"))
    q.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["q"]
    f.signal(1)
    acc.default_queue.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["q", "default"]


# --------------------------------------------------------------------------
# wait_for: the three overloads, same device


def _waited(kind, waiting, source_queue):
    """Make ``waiting`` wait for ``source_queue`` through overload ``kind``."""
    if kind == "stream":
        return waiting.wait_for(stream=source_queue)
    if kind == "positional-stream":
        return waiting.wait_for(source_queue)
    if kind == "device":
        assert source_queue is source_queue.device.default_queue
        return waiting.wait_for(device=source_queue.device)
    if kind == "positional-device":
        return waiting.wait_for(source_queue.device)
    ev = source_queue.record_event()
    if kind == "event":
        return waiting.wait_for(event=ev)
    return waiting.wait_for(ev)


KINDS = [
    "stream",
    "positional-stream",
    "device",
    "positional-device",
    "event",
    "positional-event",
]


@pytest.mark.parametrize("kind", KINDS)
def test_wait_for_same_device(acc, rec, gate, kind):
    src = acc.default_queue if "device" in kind else DeviceQueue(acc)
    waiting = DeviceQueue(acc)
    f = gate(src)
    _enq(src, rec.fn("src"))
    assert _waited(kind, waiting, src) is None
    _enq(waiting, rec.fn("after"))
    assert _not_run_yet(rec, "after")
    f.signal(1)
    waiting.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["src", "after"]


@pytest.mark.parametrize("kind", KINDS)
def test_wait_for_across_devices(acc, acc1, rec, gate, kind):
    """A queue of device 1 waits for work on device 0."""
    src = acc.default_queue if "device" in kind else DeviceQueue(acc)
    waiting = DeviceQueue(acc1)
    f = gate(src)
    _enq(src, rec.fn("dev0"))
    assert _waited(kind, waiting, src) is None
    _enq(waiting, rec.fn("dev1"))
    assert _not_run_yet(rec, "dev1")
    f.signal(1)
    waiting.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["dev0", "dev1"]


def test_wait_for_across_devices_reverse(acc, acc1, rec, gate):
    src = DeviceQueue(acc1)
    waiting = acc.default_queue
    f = gate(src)
    _enq(src, rec.fn("dev1"))
    waiting.wait_for(src)
    _enq(waiting, rec.fn("dev0"))
    assert _not_run_yet(rec, "dev0")
    f.signal(1)
    waiting.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["dev1", "dev0"]


def test_wait_for_only_covers_work_before_the_call(acc, rec, gate):
    src, waiting = DeviceQueue(acc), DeviceQueue(acc)
    _enq(src, rec.fn("before"))
    waiting.wait_for(src)
    gate(src)  # later work on src is gated; `waiting` must not care
    _enq(src, rec.fn("later"))
    _enq(waiting, rec.fn("waiting"))
    waiting.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["before", "waiting"]


def test_wait_for_self_is_noop(aq, rec):
    _enq(aq, rec.fn(1))
    assert aq.wait_for(aq) is None
    assert aq.wait_for(stream=aq) is None
    _enq(aq, rec.fn(2))
    aq.synchronize(timeout=WAIT)
    assert rec.snapshot() == [1, 2]


def test_default_queue_waits_for_own_device(acc, rec):
    q = acc.default_queue
    _enq(q, rec.fn(1))
    assert q.wait_for(device=acc) is None
    _enq(q, rec.fn(2))
    q.synchronize(timeout=WAIT)
    assert rec.snapshot() == [1, 2]


def test_wait_for_unrecorded_event_is_complete(aq, rec):
    ev = DeviceEvent(aq.device)
    aq.wait_for(ev)
    _enq(aq, rec.fn("x"))
    aq.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["x"]


@pytest.mark.parametrize("bad", [None, 0, "q", object(), CompletionFlag])
def test_wait_for_type_error(aq, bad):
    with pytest.raises(TypeError) as exc:
        aq.wait_for(bad)
    msg = str(exc.value)
    assert "incompatible function arguments" in msg
    assert "wait_for(self, stream: DeviceQueue)" in msg
    assert "wait_for(self, device: Device)" in msg
    assert "wait_for(self, event: DeviceEvent)" in msg


def test_wait_for_flag_type_error(acc, aq):
    with pytest.raises(TypeError):
        aq.wait_for(CompletionFlag(acc))


# --------------------------------------------------------------------------
# Cross-backend waits are refused


def _host_sync_message(msg):
    low = msg.lower()
    return "synchroniz" in low and "host" in low


def test_accelerator_waits_for_cpu_refused(acc, aq, rec):
    cpu = CPU()
    cq = DeviceQueue(cpu)
    cev = cq.record_event()
    for call in (
        lambda: aq.wait_for(cq),
        lambda: aq.wait_for(stream=cq),
        lambda: aq.wait_for(cpu.default_queue),
        lambda: aq.wait_for(device=cpu),
        lambda: aq.wait_for(cpu),
        lambda: aq.wait_for(event=cev),
        lambda: aq.wait_for(cev),
        lambda: acc.default_queue.wait_for(cq),
    ):
        with pytest.raises(ValueError) as exc:
            call()
        assert _host_sync_message(str(exc.value)), str(exc.value)
    # A call that raises changes nothing: the queue still runs work.
    _enq(aq, rec.fn("ok"))
    aq.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["ok"]


def test_cpu_waits_for_accelerator_refused(acc, aq, rec):
    cpu = CPU()
    cq = DeviceQueue(cpu)
    aev = aq.record_event()
    for call in (
        lambda: cq.wait_for(aq),
        lambda: cq.wait_for(stream=acc.default_queue),
        lambda: cq.wait_for(device=acc),
        lambda: cq.wait_for(acc),
        lambda: cq.wait_for(event=aev),
        lambda: cpu.default_queue.wait_for(aq),
    ):
        with pytest.raises(ValueError) as exc:
            call()
        assert _host_sync_message(str(exc.value)), str(exc.value)
    _enq(cq, rec.fn("ok"))
    cq.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["ok"]


# --------------------------------------------------------------------------
# record_event


def test_record_event_new(acc, aq):
    ev = aq.record_event()
    assert isinstance(ev, DeviceEvent)
    assert ev.device is acc
    ev.synchronize(timeout=WAIT)
    assert ev.is_ready()
    ev2 = aq.record_event()
    assert ev2 != ev


def test_record_event_existing(acc, aq):
    ev = DeviceEvent(acc)
    assert aq.record_event(ev) is None
    assert aq.record_event(event=ev) is None
    ev.synchronize(timeout=WAIT)
    assert ev.is_ready()


def test_record_event_on_default_queue(acc):
    ev = acc.default_queue.record_event()
    ev.synchronize(timeout=WAIT)
    assert ev.device is acc


def test_record_cpu_event_on_accelerator_queue(acc, aq):
    ev = DeviceEvent(CPU())
    with pytest.raises(ValueError):
        aq.record_event(ev)
    with pytest.raises(ValueError):
        DeviceQueue(CPU()).record_event(DeviceEvent(acc))
    assert ev.is_ready()  # unchanged: still unrecorded


def test_record_event_of_other_accelerator(acc, acc1, gate):
    ev1 = DeviceEvent(acc1)
    q0 = DeviceQueue(acc)
    gate(q0)
    with pytest.raises(ValueError):
        q0.record_event(ev1)
    assert ev1.is_ready()  # a call that raises changes nothing
    with pytest.raises(ValueError):
        DeviceQueue(acc1).record_event(DeviceEvent(acc))


@pytest.mark.parametrize("bad", [0, "ev", object(), None])
def test_record_event_type_error(aq, bad):
    with pytest.raises(TypeError) as exc:
        aq.record_event(bad)
    msg = str(exc.value)
    assert msg.startswith("record_event(): incompatible function arguments"), msg
    assert "Invoked with types:" in msg


# --------------------------------------------------------------------------
# wait_for_host_value


def test_gate_blocks_until_value(aq, rec):
    f = CompletionFlag(aq.device)
    assert aq.wait_for_host_value(f, 1) is None
    _enq(aq, rec.fn("x"))
    try:
        assert _not_run_yet(rec, "x")
        with pytest.raises(TimeoutError):
            aq.synchronize(timeout=0.05)
    finally:
        f.signal(1)
    aq.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["x"]


def test_gate_keywords(aq, rec):
    f = CompletionFlag(aq.device)
    aq.wait_for_host_value(flag=f, value=5)
    _enq(aq, rec.fn("x"))
    f.signal(value=5)
    aq.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["x"]


def test_gate_needs_equality(aq, rec):
    f = CompletionFlag(aq.device)
    aq.wait_for_host_value(f, 2)
    _enq(aq, rec.fn("x"))
    try:
        f.signal(1)
        assert _not_run_yet(rec, "x")
        f.signal(3)  # greater is not equal
        assert _not_run_yet(rec, "x")
    finally:
        f.signal(2)
    aq.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["x"]


def test_gate_already_equal_passes(aq, rec):
    f = CompletionFlag(aq.device)
    f.signal(7)
    aq.wait_for_host_value(f, 7)
    _enq(aq, rec.fn("x"))
    aq.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["x"]
    g = CompletionFlag(aq.device)
    aq.wait_for_host_value(g, 0)  # a fresh flag holds 0
    aq.synchronize(timeout=WAIT)


def test_gate_u64_max(aq, rec):
    f = CompletionFlag(aq.device)
    aq.wait_for_host_value(f, 2**64 - 1)
    _enq(aq, rec.fn("x"))
    try:
        assert _not_run_yet(rec, "x")
    finally:
        f.signal(2**64 - 1)
    aq.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["x"]


def test_gate_released_from_another_thread(aq, rec):
    f = CompletionFlag(aq.device)
    aq.wait_for_host_value(f, 1)
    _enq(aq, rec.fn("x"))
    t = threading.Timer(0.1, f.signal, args=(1,))
    t.start()
    try:
        aq.synchronize(timeout=WAIT)
    finally:
        f.signal(1)
        t.join(WAIT)
    assert rec.snapshot() == ["x"]


def test_gate_released_by_host_function_on_other_device(acc, acc1, rec):
    q0, q1 = DeviceQueue(acc), DeviceQueue(acc1)
    f = CompletionFlag(acc)
    q0.wait_for_host_value(f, 1)
    _enq(q0, rec.fn("q0"))
    _enq(q1, lambda: f.signal(1))
    try:
        q0.synchronize(timeout=WAIT)
    finally:
        f.signal(1)
    assert rec.snapshot() == ["q0"]


def test_gate_blocks_device_synchronize(acc, aq, gate):
    f = gate(aq)
    with pytest.raises(TimeoutError):
        acc.synchronize(timeout=0.1)
    f.signal(1)
    acc.synchronize(timeout=WAIT)


def test_gate_on_default_queue(acc, rec):
    f = CompletionFlag(acc)
    acc.default_queue.wait_for_host_value(f, 1)
    _enq(acc, rec.fn("x"))
    try:
        assert _not_run_yet(rec, "x")
    finally:
        f.signal(1)
    acc.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["x"]


def test_many_gates_in_sequence(aq, rec):
    f = CompletionFlag(aq.device)
    for i in range(1, 21):
        aq.wait_for_host_value(f, i)
        _enq(aq, rec.fn(i))
    try:
        for i in range(1, 21):
            f.signal(i)
            assert rec.wait(i), i
    finally:
        f.signal(20)
    aq.synchronize(timeout=WAIT)
    assert rec.snapshot() == list(range(1, 21))


def test_flag_of_other_device_value_error(acc, aq, rec):
    cpu_flag = CompletionFlag(CPU())
    with pytest.raises(ValueError):
        aq.wait_for_host_value(cpu_flag, 1)
    with pytest.raises(ValueError):
        DeviceQueue(CPU()).wait_for_host_value(CompletionFlag(acc), 1)
    # Nothing was gated.
    _enq(aq, rec.fn("x"))
    aq.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["x"]


def test_flag_of_other_accelerator_value_error(acc, acc1, rec):
    q1 = DeviceQueue(acc1)
    with pytest.raises(ValueError):
        q1.wait_for_host_value(CompletionFlag(acc), 1)
    with pytest.raises(ValueError):
        acc.default_queue.wait_for_host_value(CompletionFlag(acc1), 1)
    _enq(q1, rec.fn("x"))
    q1.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["x"]


@pytest.mark.parametrize("bad", [-1, 2**64, 1.5, "1", None])
def test_gate_bad_value_type_error(aq, bad, rec):
    f = CompletionFlag(aq.device)
    with pytest.raises(TypeError) as exc:
        aq.wait_for_host_value(f, bad)
    assert "value" in str(exc.value)
    _enq(aq, rec.fn("x"))  # not gated
    aq.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["x"]


@pytest.mark.parametrize("bad", [None, 0, object()])
def test_gate_bad_flag_type_error(aq, bad):
    with pytest.raises(TypeError):
        aq.wait_for_host_value(bad, 1)


# --------------------------------------------------------------------------
# synchronize


def test_synchronize_idle(aq):
    assert aq.synchronize() is None
    assert aq.synchronize(timeout=0) is None
    assert aq.synchronize(timeout=1.5) is None


def test_synchronize_timeout_then_work_runs(aq, rec):
    f = CompletionFlag(aq.device)
    aq.wait_for_host_value(f, 1)
    _enq(aq, rec.fn("x"))
    try:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            aq.synchronize(timeout=0.1)
        assert time.monotonic() - t0 >= 0.09
        with pytest.raises(TimeoutError):
            aq.synchronize(timeout=0)
        assert not rec.has("x")
    finally:
        f.signal(1)
    assert aq.synchronize(timeout=WAIT) is None
    assert rec.snapshot() == ["x"]


def test_device_synchronize_covers_every_queue(acc, rec):
    qs = [DeviceQueue(acc) for _ in range(3)] + [acc.default_queue]
    flags = [CompletionFlag(acc) for _ in qs]
    for i, (q, f) in enumerate(zip(qs, flags, strict=True)):
        q.wait_for_host_value(f, 1)
        _enq(q, rec.fn(i))
    try:
        for i, f in enumerate(flags):
            with pytest.raises(TimeoutError):
                acc.synchronize(timeout=0.05)
            f.signal(1)
            assert rec.wait(i)
        assert acc.synchronize(timeout=WAIT) is None
        assert sorted(rec.snapshot()) == list(range(len(qs)))
    finally:
        for f in flags:
            f.signal(1)


def test_device_synchronize_only_its_own_device(acc, acc1, gate):
    q1 = DeviceQueue(acc1)
    f = gate(q1)
    assert acc.synchronize(timeout=WAIT) is None
    with pytest.raises(TimeoutError):
        acc1.synchronize(timeout=0.05)
    f.signal(1)
    acc1.synchronize(timeout=WAIT)
    assert q1.device is acc1


# --------------------------------------------------------------------------
# Many queues, dropped queues


def test_many_queues_all_progress(acc, rec):
    qs = [DeviceQueue(acc) for _ in range(64)]
    for i, q in enumerate(qs):
        _enq(q, rec.fn(i))
    for q in qs:
        q.synchronize(timeout=WAIT)
    assert sorted(rec.snapshot()) == list(range(64))
    assert len({q.native_stream_handle for q in qs}) == 64


def test_queues_created_and_dropped(acc, rec):
    for i in range(200):
        q = DeviceQueue(acc)
        _enq(q, rec.fn(i))
        del q
    gc.collect()
    acc.synchronize(timeout=WAIT)
    assert sorted(rec.snapshot()) == list(range(200))


def test_work_on_dropped_queue_still_runs(acc, rec):
    q = DeviceQueue(acc)
    f = CompletionFlag(acc)
    q.wait_for_host_value(f, 1)
    _enq(q, rec.fn("x"))
    del q
    gc.collect()
    try:
        assert _not_run_yet(rec, "x")
    finally:
        f.signal(1)
    assert rec.wait("x")
    acc.synchronize(timeout=WAIT)


def test_device_synchronize_covers_dropped_queue(acc, rec):
    """SPEC §3/§8: device.synchronize waits for all work of the device, and
    work enqueued before a queue was garbage collected still counts."""
    q = DeviceQueue(acc)
    f = CompletionFlag(acc)
    q.wait_for_host_value(f, 1)
    _enq(q, rec.fn("x"))
    del q
    gc.collect()
    try:
        with pytest.raises(TimeoutError):
            acc.synchronize(timeout=0.1)
    finally:
        f.signal(1)
    acc.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["x"]  # done by the time synchronize returned


def test_queue_usable_from_many_threads(acc, rec):
    q = DeviceQueue(acc)
    errors = []

    def worker(k):
        try:
            for i in range(25):
                _enq(q, rec.fn((k, i)))
                q.record_event()
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(repr(exc))

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(WAIT)
    q.synchronize(timeout=WAIT)
    assert errors == []
    items = rec.snapshot()
    assert len(items) == 100
    for k in range(4):  # in order per producer thread
        assert [i for (kk, i) in items if kk == k] == list(range(25))


def test_accelerator_api_helper_matches(acc):
    assert driver.accelerator_api() == acc.api
