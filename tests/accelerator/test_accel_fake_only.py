"""Checks only the fake driver (tests/fake_driver) can answer, through its
control API: stream flags, live driver objects, driver threads and the
fake's documented device properties.  Skipped on a real driver (the fake is
detected by ``MAX_DRIVER_FAKE_LIBRARY``, set by tests/test_fake_backends.py).
"""

from __future__ import annotations

import gc
import os
import threading
import time

import pytest
from accel_support import ENQ, ENQ_ASYNC, FAKE_LIBRARY, WAIT, wait_until

from max import driver
from max.driver import CPU, Accelerator, CompletionFlag, DeviceEvent, DeviceQueue

pytestmark = pytest.mark.skipif(
    FAKE_LIBRARY is None,
    reason="not running on the fake driver (MAX_DRIVER_FAKE_LIBRARY unset)",
)

NON_BLOCKING = 0x1  # CU_STREAM_NON_BLOCKING == hipStreamNonBlocking
KINDS = ("stream", "event", "host_alloc")


def _expected_devices():
    return int(os.environ.get("FAKE_GPU_DEVICES", "2"))


def test_selection_uses_the_fake(acc, fake):
    assert driver.accelerator_count() == _expected_devices()
    sel = driver.backend_selection()
    chosen = [e for e in sel if e["chosen"]]
    assert len(chosen) == 1, sel
    assert chosen[0]["api"] == acc.api
    assert chosen[0]["loaded"] is True
    assert chosen[0]["library"] == fake.path
    assert chosen[0]["device_count"] == _expected_devices()
    assert chosen[0]["error"] is None


def test_fake_device_properties(acc, fake):
    for i in range(driver.accelerator_count()):
        d = Accelerator(i)
        assert d.model_name == f"Fake GPU {i}"
        if d.api == "cuda":
            cc = os.environ.get("FAKE_GPU_CC", "9.0")
            major, minor = cc.split(".")
            assert d.architecture_name == f"sm_{major}{minor}"
        else:
            gcn = os.environ.get("FAKE_GPU_GCN", "gfx942")
            assert d.architecture_name == gcn.split(":")[0]


def test_queues_are_non_blocking_streams(acc, fake):
    queues = [DeviceQueue(acc), acc.default_queue]
    for i in range(driver.accelerator_count()):
        queues += [DeviceQueue(Accelerator(i)), Accelerator(i).default_queue]
    for q in queues:
        flags = fake.stream_flags(q.native_stream_handle)
        assert flags & NON_BLOCKING, (repr(q), hex(flags))


def _settled(fake, kind):
    """The live count once earlier tests' objects are gone: the cleanup
    thread destroys dropped streams shortly after their work is done."""
    last = fake.live(kind)
    while True:
        time.sleep(0.05)
        now = fake.live(kind)
        if now == last:
            return now
        last = now


def test_native_handle_is_a_live_fake_stream(acc, fake):
    before = _settled(fake, "stream")
    q = DeviceQueue(acc)
    assert fake.live("stream") >= before + 1
    assert fake.stream_flags(q.native_stream_handle) & NON_BLOCKING
    del q
    gc.collect()
    assert wait_until(lambda: fake.live("stream") == before, timeout=WAIT)


def _drain():
    gc.collect()
    for i in range(driver.accelerator_count()):
        Accelerator(i).synchronize(timeout=WAIT)
    CPU().synchronize(timeout=WAIT)
    gc.collect()


def _workload(rec, tag):
    objs = []
    for i in range(driver.accelerator_count()):
        d = Accelerator(i)
        for _ in range(10):
            q = DeviceQueue(d)
            f = CompletionFlag(d)
            ev = DeviceEvent(d, enable_timing=True)
            q.record_event(ev)
            ev2 = q.record_event()
            q.wait_for(d.default_queue)
            q.wait_for(ev2)
            getattr(q, ENQ)(rec.fn((tag, i, len(objs))))
            getattr(q, ENQ_ASYNC)(lambda: None, f, 1, CPU())
            q.wait_for_host_value(f, 1)
            objs.append((q, f, ev, ev2))
    return objs


def _free_host_name(api):
    return "cuMemFreeHost" if api == "cuda" else "hipHostFree"


def test_no_leaked_driver_objects(acc, fake, rec):
    """Streams go back to the driver once their objects are dropped.  Flags
    and host-function gates come from each device's pinned pool (slabs
    allocated once, never freed: freeing pinned memory synchronizes the
    device), so they allocate and free no pinned memory of their own.
    Driver events may be kept in a bounded pool for reuse, so for events the
    check is that repeating the same work does not make the count grow."""
    _drain()
    base = {k: _settled(fake, k) for k in KINDS}
    frees = fake.calls(_free_host_name(acc.api))
    events_after = []
    for round_ in range(4):
        objs = _workload(rec, round_)
        live = fake.lives()
        assert live["stream"] >= base["stream"] + len(objs), (base, live)
        assert live["host_alloc"] == base["host_alloc"], (base, live)
        del objs
        _drain()
        ok = wait_until(
            lambda: (
                fake.live("stream") == base["stream"]
                and fake.live("host_alloc") == base["host_alloc"]
            ),
            timeout=WAIT,
        )
        assert ok, f"driver objects leaked: before {base}, after {fake.lives()}"
        events_after.append(fake.live("event"))
    # Round 0 filled whatever event pool exists; later rounds reuse it (a
    # few markers may still be with the cleanup thread when a round ends).
    assert max(events_after[1:]) <= events_after[0] + 16, events_after
    assert len(rec.snapshot()) == 4 * 10 * driver.accelerator_count()
    assert fake.calls(_free_host_name(acc.api)) == frees


def test_flags_come_from_a_pinned_pool(acc, fake):
    """Thousands of flags made and dropped cost a few slabs of pinned
    memory, allocated once and never freed."""
    _drain()
    base = fake.live("host_alloc")
    frees = fake.calls(_free_host_name(acc.api))
    for _ in range(3):
        flags = [CompletionFlag(acc) for _ in range(1500)]
        assert len({f.device_ptr for f in flags}) == len(flags)
        del flags
    assert fake.calls(_free_host_name(acc.api)) == frees
    assert base <= fake.live("host_alloc") <= base + 2  # 1024 slots per slab


def test_no_leak_with_dropped_pending_work(acc, fake, rec):
    _drain()
    base = {k: _settled(fake, k) for k in KINDS}
    release = CompletionFlag(acc)
    for i in range(10):
        q = DeviceQueue(acc)
        q.wait_for_host_value(release, 1)
        ev = q.record_event()
        getattr(q, ENQ)(rec.fn(i))
        other = DeviceQueue(acc)
        other.wait_for(ev)
        del q, ev, other
    gc.collect()
    release.signal(1)
    del release
    _drain()
    assert sorted(rec.snapshot()) == list(range(10))
    ok = wait_until(
        lambda: (
            fake.live("stream") == base["stream"]
            and fake.live("host_alloc") == base["host_alloc"]
            and fake.live("event") <= base["event"] + 10
        ),  # a pool may keep some
        timeout=WAIT,
    )
    assert ok, f"driver objects leaked: before {base}, after {fake.lives()}"


def test_no_growth_of_fake_threads(acc, fake):
    def churn():
        for _ in range(50):
            q = DeviceQueue(acc)
            getattr(q, ENQ)(lambda: None)
            q.record_event()
            del q
        _drain()

    churn()  # warm up whatever pools exist
    base = fake.threads()
    for _ in range(4):
        churn()
    # Threads of destroyed streams may take a moment to exit.
    ok = wait_until(lambda: fake.threads() <= base + 2, timeout=WAIT)
    assert ok, (base, fake.threads())


def test_default_queues_are_live_streams(acc, fake):
    """Default queues exist (as streams of their own) for every device."""
    handles = {
        Accelerator(i).default_queue.native_stream_handle
        for i in range(driver.accelerator_count())
    }
    assert 0 not in handles
    assert fake.live("stream") >= len(handles)
    for h in handles:
        assert fake.stream_flags(h) & NON_BLOCKING


def test_host_function_goes_through_the_driver(acc, aq, fake):
    """A host function is a driver host-function launch (or stream callback)
    on the queue's own stream, not something run beside the driver."""
    names = (
        ["cuLaunchHostFunc", "cuStreamAddCallback"]
        if acc.api == "cuda"
        else ["hipLaunchHostFunc", "hipStreamAddCallback"]
    )
    before = sum(fake.calls(n) for n in names)
    for _ in range(3):
        getattr(aq, ENQ)(lambda: None)
    aq.synchronize(timeout=WAIT)
    assert sum(fake.calls(n) for n in names) >= before + 3


def test_gate_goes_through_stream_wait_value(acc, aq, fake):
    name = "cuStreamWaitValue64" if acc.api == "cuda" else "hipStreamWaitValue64"
    before = fake.calls(name)
    f = CompletionFlag(acc)
    aq.wait_for_host_value(f, 1)
    f.signal(1)
    aq.synchronize(timeout=WAIT)
    assert fake.calls(name) >= before + 1


def test_synchronize_adds_nothing_to_the_stream_but_an_event(acc, aq, fake, gate):
    """A long synchronize() waits on an event it records; it never puts a
    host function or stream callback into the user's stream (those would
    wait on the driver's shared callback thread, and cost a round trip)."""
    names = (
        ["cuLaunchHostFunc", "cuStreamAddCallback"]
        if acc.api == "cuda"
        else ["hipLaunchHostFunc", "hipStreamAddCallback"]
    )
    f = gate(aq)
    getattr(aq, ENQ)(lambda: None)
    before = sum(fake.calls(n) for n in names)
    threading.Timer(0.3, f.signal, args=(1,)).start()
    aq.synchronize(timeout=WAIT)
    acc.synchronize(timeout=WAIT)
    assert sum(fake.calls(n) for n in names) == before
