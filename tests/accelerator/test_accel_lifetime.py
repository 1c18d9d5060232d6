"""Object lifetime on an accelerator: nothing enqueued is lost when the
Python objects go away, and the interpreter exits cleanly with work pending
(SPEC §6 lifetime, §8, §10)."""

from __future__ import annotations

import gc
import threading
import time

import pytest
from accel_support import ENQ, ENQ_ASYNC, NOT_YET, WAIT

from max.driver import CPU, CompletionFlag, DeviceEvent, DeviceQueue


def _enq(target, fn):
    getattr(target, ENQ)(fn)


def test_dropped_event_used_by_pending_wait(acc, gate, rec):
    src, waiting = DeviceQueue(acc), DeviceQueue(acc)
    f = gate(src)
    ev = src.record_event()
    waiting.wait_for(ev)
    _enq(waiting, rec.fn("waiting"))
    del ev
    gc.collect()
    time.sleep(NOT_YET)
    assert not rec.has("waiting")
    f.signal(1)
    waiting.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["waiting"]


def test_dropped_explicit_event_used_by_pending_wait(acc, gate, rec):
    src, waiting = DeviceQueue(acc), DeviceQueue(acc)
    f = gate(src)
    ev = DeviceEvent(acc, enable_timing=True)
    src.record_event(ev)
    waiting.wait_for(event=ev)
    _enq(waiting, rec.fn("waiting"))
    del ev
    gc.collect()
    time.sleep(NOT_YET)
    assert not rec.has("waiting")
    f.signal(1)
    waiting.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["waiting"]


def test_dropped_waited_queue(acc, rec):
    src, waiting = DeviceQueue(acc), DeviceQueue(acc)
    f = CompletionFlag(acc)
    src.wait_for_host_value(f, 1)
    _enq(src, rec.fn("src"))
    waiting.wait_for(src)
    _enq(waiting, rec.fn("waiting"))
    del src
    gc.collect()
    try:
        time.sleep(NOT_YET)
        assert rec.snapshot() == []
    finally:
        f.signal(1)
    waiting.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["src", "waiting"]


def test_dropped_queue_on_second_device_waited_by_first(acc, acc1, rec):
    src, waiting = DeviceQueue(acc1), DeviceQueue(acc)
    f = CompletionFlag(acc1)
    src.wait_for_host_value(f, 1)
    _enq(src, rec.fn("src"))
    waiting.wait_for(src)
    _enq(waiting, rec.fn("waiting"))
    del src
    gc.collect()
    try:
        time.sleep(NOT_YET)
        assert rec.snapshot() == []
    finally:
        f.signal(1)
    waiting.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["src", "waiting"]


def test_dropped_flag_used_by_gate_and_async_fn(acc, rec):
    q = DeviceQueue(acc)
    f = CompletionFlag(acc)
    release = threading.Event()
    getattr(q, ENQ_ASYNC)(lambda: release.wait(WAIT), f, 5, CPU())
    q.wait_for_host_value(f, 5)
    _enq(q, rec.fn("after"))
    del f, q
    gc.collect()
    time.sleep(NOT_YET)
    assert not rec.has("after")
    release.set()
    assert rec.wait("after")
    acc.synchronize(timeout=WAIT)


def test_dropped_everything_then_device_sync(acc, rec):
    release = threading.Event()
    for i in range(20):
        q = DeviceQueue(acc)
        f = CompletionFlag(acc)
        ev = DeviceEvent(acc)
        _enq(q, lambda: release.wait(WAIT))
        q.record_event(ev)
        getattr(q, ENQ_ASYNC)(rec.fn(("async", i)), f, 1, CPU())
        q.wait_for_host_value(f, 1)
        _enq(q, rec.fn(("after", i)))
    del q, f, ev
    gc.collect()
    release.set()
    acc.synchronize(timeout=WAIT)
    items = rec.snapshot()
    assert sorted(x for x in items if x[0] == "after") == [
        ("after", i) for i in range(20)
    ]
    assert sorted(x for x in items if x[0] == "async") == [
        ("async", i) for i in range(20)
    ]


def test_many_objects_created_and_collected(acc):
    for _ in range(5):
        objs = []
        for _ in range(50):
            q = DeviceQueue(acc)
            objs.append(
                (q, q.record_event(), CompletionFlag(acc), DeviceEvent(acc, True))
            )
        objs[-1][0].synchronize(timeout=WAIT)
        del objs, q
        gc.collect()
    acc.synchronize(timeout=WAIT)
    # The device still works.
    done = []
    q = DeviceQueue(acc)
    _enq(q, lambda: done.append(1))
    q.synchronize(timeout=WAIT)
    assert done == [1]


# --------------------------------------------------------------------------
# Interpreter exit


EXIT_SCENARIOS = {
    "gated": r"""
from max.driver import Accelerator, CompletionFlag, DeviceQueue
acc = Accelerator()
q = DeviceQueue(acc)
f = CompletionFlag(acc)
q.wait_for_host_value(f, 1)
getattr(q, "__unsafe_enqueue_py_host_func")(lambda: print("SHOULD-NOT-RUN"))
print("EXITING", flush=True)
""",
    "gated-default": r"""
from max.driver import Accelerator, CompletionFlag
acc = Accelerator()
f = CompletionFlag(acc)
acc.default_queue.wait_for_host_value(f, 1)
getattr(acc, "__unsafe_enqueue_py_host_func")(lambda: None)
print("EXITING", flush=True)
""",
    "sleeping-async": r"""
import time
from max.driver import CPU, Accelerator, CompletionFlag, DeviceQueue
acc = Accelerator()
q = DeviceQueue(acc)
f = CompletionFlag(acc)
getattr(q, "__unsafe_enqueue_async_py_host_func")(lambda: time.sleep(60), f, 1, CPU())
q.wait_for_host_value(f, 1)
getattr(q, "__unsafe_enqueue_py_host_func")(lambda: None)
time.sleep(0.2)
print("EXITING", flush=True)
""",
    "busy-host-functions": r"""
import time
from max import driver
from max.driver import Accelerator, DeviceQueue
for i in range(driver.accelerator_count()):
    for _ in range(4):
        q = DeviceQueue(Accelerator(i))
        for _ in range(100):
            getattr(q, "__unsafe_enqueue_py_host_func")(lambda: time.sleep(0.01))
print("EXITING", flush=True)
""",
    # Cleanup still pending on the cleanup thread at exit (a dropped queue
    # whose stream waits for a flag never signalled, device memory and
    # events released after it): the thread must stop calling the driver
    # before the driver tears itself down.
    "cleanup-pending": r"""
import gc, time
from max.driver import Accelerator, Buffer, CompletionFlag, DeviceEvent, DeviceQueue
from max.dtype import DType
acc = Accelerator()
q = DeviceQueue(acc)
f = CompletionFlag(acc)
q.wait_for_host_value(f, 1)
buf = Buffer(DType.int8, (1 << 16,), q)
events = [q.record_event(), DeviceEvent(acc, enable_timing=True)]
q.wait_for(events[0])
del q, buf, events
gc.collect()
time.sleep(0.1)
print("EXITING", flush=True)
""",
    "events-and-flags-alive": r"""
from max.driver import Accelerator, CompletionFlag, DeviceEvent, DeviceQueue
acc = Accelerator()
keep = []
for _ in range(20):
    q = DeviceQueue(acc)
    f = CompletionFlag(acc)
    q.wait_for_host_value(f, 3)
    keep.append((q, f, q.record_event(), DeviceEvent(acc, enable_timing=True)))
print("EXITING", flush=True)
""",
}


@pytest.mark.parametrize("scenario", sorted(EXIT_SCENARIOS))
def test_interpreter_exit_with_pending_work(run_acc_py, scenario):
    t0 = time.monotonic()
    r = run_acc_py(EXIT_SCENARIOS[scenario], timeout=60)
    elapsed = time.monotonic() - t0
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    assert "EXITING" in r.stdout
    assert "SHOULD-NOT-RUN" not in r.stdout
    assert "Fatal Python error" not in r.stderr, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    # No driver call after the driver tore itself down at exit (the fake
    # driver reports one on stderr).
    assert "fake_gpu: violation" not in r.stderr, r.stderr
    # "promptly": far below the 60 s the sleeping host function would take.
    assert elapsed < 30, elapsed
