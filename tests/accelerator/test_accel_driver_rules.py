"""The rules of real GPU drivers (DESIGN.md decision 11), as regressions.

Each test is a case that hangs or fails on a real driver when the backend
breaks one rule; the fake driver (tests/fake_driver) enforces the same rules
(one callback thread per device, no driver calls from callbacks, frees of
pinned memory that synchronize the device, enqueues that block on a full
stream), so they fail without a GPU too.  Every test of this folder also
fails when the fake records a rule violation or a driver cleanup fails (see
conftest.py).  Cases that deadlock when broken run in a child process with
a time limit.
"""

from __future__ import annotations

import gc
import threading
import time

import pytest
from accel_support import ENQ, ENQ_ASYNC, WAIT

from max._core import driver as core
from max.driver import CPU, CompletionFlag, DeviceEvent, DeviceQueue

# Longer than any of these operations takes when the rules hold, shorter
# than WAIT so that a broken rule fails fast.
SHORT = 5.0


# --------------------------------------------------------------------------
# Host functions run on our threads and may use the whole API


def test_host_function_may_enqueue_record_and_wait(acc, aq, rec):
    """From inside a host function: create queues, flags and events, record,
    order queues, gate, enqueue host functions, synchronize other queues."""
    out = {}

    def fn():
        q2 = DeviceQueue(acc)
        f = CompletionFlag(acc)
        ev = DeviceEvent(acc, enable_timing=True)
        q2.record_event(ev)
        q2.wait_for(acc.default_queue)
        q2.wait_for(q2.record_event())
        q2.wait_for_host_value(f, 0)
        getattr(q2, ENQ)(rec.fn("inner"))
        q2.synchronize(timeout=WAIT)
        ev.synchronize(timeout=WAIT)
        out["ready"] = ev.is_ready()
        out["stats"] = sorted(acc.stats)
        out["after_own"] = aq.record_event()  # after fn: not waited for

    getattr(aq, ENQ)(fn)
    aq.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["inner"]
    assert out["ready"] is True
    assert "free_memory" in out["stats"]
    out["after_own"].synchronize(timeout=WAIT)


def test_host_function_uses_another_device(acc, acc1, rec):
    q0, q1 = DeviceQueue(acc), DeviceQueue(acc1)
    box = {}

    def fn():
        ev1 = q1.record_event()
        getattr(q1, ENQ)(rec.fn("on-1"))
        q1.wait_for(ev1)
        q1.synchronize(timeout=WAIT)
        box["ev"] = q1.record_event()
        box["flag"] = CompletionFlag(acc1)

    getattr(q0, ENQ)(fn)
    q0.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["on-1"]
    box["ev"].synchronize(timeout=WAIT)
    assert box["flag"].device == acc1


def test_host_function_cannot_wait_for_its_own_later_work(aq):
    """Waiting for work enqueued after the host function on its own queue
    can never end: it raises instead of hanging (as on the CPU)."""
    errors = []
    before = aq.record_event()

    def fn():
        before.synchronize(timeout=WAIT)  # recorded before fn: fine
        for wait in (aq.synchronize, aq.record_event().synchronize):
            try:
                wait(timeout=WAIT)
            except ValueError as e:
                errors.append(str(e))

    getattr(aq, ENQ)(fn)
    aq.synchronize(timeout=WAIT)
    assert len(errors) == 2, errors
    assert all("own queue" in e for e in errors), errors


def test_dropping_last_references_inside_a_host_function(acc, aq, rec):
    """Releasing a queue, a flag and events from a host function frees
    nothing there: streams are destroyed later, on a thread that may call
    the driver, and pinned slots go back to their pool."""
    other = DeviceQueue(acc)
    holder = {
        "queue": DeviceQueue(acc),
        "flag": CompletionFlag(acc),
        "event": DeviceEvent(acc, enable_timing=True),
        "recorded": other.record_event(),
    }
    holder["queue"].wait_for_host_value(holder["flag"], 0)
    getattr(holder["queue"], ENQ)(rec.fn("held"))
    holder["queue"].record_event(holder["event"])

    def fn():
        holder.clear()
        gc.collect()
        rec.add("dropped")

    getattr(aq, ENQ)(fn)
    aq.synchronize(timeout=WAIT)
    acc.synchronize(timeout=WAIT)
    assert sorted(rec.snapshot()) == ["dropped", "held"]


def test_host_function_waits_for_one_on_another_queue(acc, rec):
    """SPEC §10: a host function on one queue may block until one on another
    queue runs (the driver runs the callbacks of all streams of a device on
    one thread: the wait must not happen there)."""
    a, b = DeviceQueue(acc), DeviceQueue(acc)
    go = threading.Event()

    def waiter():
        rec.add("a-start")
        rec.add(("a-end", go.wait(SHORT)))

    getattr(a, ENQ)(waiter)
    assert rec.wait("a-start")
    getattr(b, ENQ)(lambda: (go.set(), rec.add("b")))
    a.synchronize(timeout=WAIT)
    b.synchronize(timeout=WAIT)
    assert ("a-end", True) in rec.snapshot(), rec.snapshot()


def test_slow_host_function_does_not_delay_another_queue(acc):
    a, b = DeviceQueue(acc), DeviceQueue(acc)
    started, release = threading.Event(), threading.Event()
    getattr(a, ENQ)(lambda: (started.set(), release.wait(WAIT)))
    try:
        assert started.wait(WAIT)  # a's host function is running
        ran = []
        getattr(b, ENQ)(lambda: ran.append(1))
        t0 = time.monotonic()
        b.synchronize(timeout=SHORT)
        assert time.monotonic() - t0 < SHORT
        assert ran == [1]
        assert not a.record_event().is_ready()
    finally:
        release.set()
    a.synchronize(timeout=WAIT)


def test_async_host_function_on_a_busy_device(acc):
    """The kickoff hands fn to a worker even while another queue's host
    function blocks."""
    a, b = DeviceQueue(acc), DeviceQueue(acc)
    started, release = threading.Event(), threading.Event()
    getattr(a, ENQ)(lambda: (started.set(), release.wait(WAIT)))
    try:
        assert started.wait(WAIT)
        f = CompletionFlag(acc)
        getattr(b, ENQ_ASYNC)(lambda: None, f, 7, CPU())
        b.wait_for_host_value(f, 7)
        b.synchronize(timeout=SHORT)
        assert f.load() == 7
    finally:
        release.set()
    a.synchronize(timeout=WAIT)


# --------------------------------------------------------------------------
# Cases that deadlock on a real driver when a rule is broken


FLAG_FREE = r"""
from max.driver import Accelerator, CompletionFlag, DeviceQueue
a = Accelerator()
q = DeviceQueue(a)
f = CompletionFlag(a)
q.wait_for_host_value(f, 1)
for _ in range(5):
    CompletionFlag(a)  # made and dropped while q is gated on f
f.signal(1)
q.synchronize(timeout=20)
print("DONE")
"""


def test_dropping_a_flag_while_a_queue_is_gated(run_acc_py):
    """Freeing pinned memory synchronizes the device, and the device waits
    for f: a flag dropped meanwhile must not free its memory."""
    r = run_acc_py(FLAG_FREE, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "DONE" in r.stdout
    assert "violation" not in r.stderr, r.stderr


MANY_HOST_FNS = r"""
from max.driver import Accelerator, DeviceQueue
q = DeviceQueue(Accelerator())
ran = []
for i in range(2000):
    getattr(q, "__unsafe_enqueue_py_host_func")(lambda i=i: ran.append(i))
q.synchronize(timeout=60)
assert ran == list(range(2000)), len(ran)
print("DONE")
"""


def test_two_thousand_host_functions_in_a_loop(run_acc_py):
    """More host functions than the driver's queue holds: an enqueue blocks
    until the stream makes room, which needs the host functions to run,
    which needs the GIL: the enqueue must not hold it."""
    r = run_acc_py(MANY_HOST_FNS, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "DONE" in r.stdout
    assert "violation" not in r.stderr, r.stderr


GATED_FLOOD = r"""
import threading
from max.driver import Accelerator, CompletionFlag, DeviceQueue
a = Accelerator()
q = DeviceQueue(a)
f = CompletionFlag(a)
q.wait_for_host_value(f, 1)
threading.Timer(0.5, f.signal, args=(1,)).start()  # a Python thread opens it
events = [q.record_event() for _ in range(3000)]
q.synchronize(timeout=60)
assert all(e.is_ready() for e in events)
print("DONE")
"""


def test_enqueues_behind_a_gate_opened_by_a_python_thread(run_acc_py):
    r = run_acc_py(GATED_FLOOD, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "DONE" in r.stdout
    assert "violation" not in r.stderr, r.stderr


# --------------------------------------------------------------------------
# What the driver supports is probed and reported


def test_capabilities_are_probed(acc):
    caps = acc._capabilities()
    assert set(caps) == {
        "driver_version",
        "stream_memory_operations",
        "host_function_entry_point",
        "python_host_functions_run_on",
        "memory_pools",
        "staging_ring",
        "pinned_reserve_bytes",
        "graph_capture",
    }
    assert caps["graph_capture"] == "available"
    assert caps["staging_ring"] == (4, 8 << 20)  # the defaults
    assert caps["pinned_reserve_bytes"] == 8 << 20
    assert isinstance(caps["driver_version"], int)
    assert isinstance(caps["memory_pools"], bool)
    assert isinstance(caps["stream_memory_operations"], bool)
    names = {"cuda": ("cuLaunchHostFunc", "cuStreamAddCallback", "")}
    names["hip"] = ("hipLaunchHostFunc", "hipStreamAddCallback", "")
    assert caps["host_function_entry_point"] in names[acc.api]
    expected = (
        "worker threads"
        if caps["stream_memory_operations"]
        else "driver callback thread"
    )
    if caps["host_function_entry_point"]:
        assert caps["python_host_functions_run_on"] == expected
    if acc.api == "cuda":
        assert caps["driver_version"] >= 11000


STAGING_CHILD = r"""
from max.driver import Accelerator
print(Accelerator(0)._capabilities()["staging_ring"])
"""


@pytest.mark.parametrize(
    ("chunks", "mib", "expected"),
    [("2", "1", (2, 1 << 20)), ("1", "0", (2, 1 << 20)), ("x", "", (4, 8 << 20))],
)
def test_staging_ring_is_sized_by_the_environment(run_acc_py, chunks, mib, expected):
    """MAX_DRIVER_STAGING_CHUNKS / _CHUNK_MIB, read when a device opens:
    out of range they are clamped (at least 2 chunks, for double
    buffering, of at least 1 MiB), malformed they are ignored."""
    r = run_acc_py(
        STAGING_CHILD,
        MAX_DRIVER_STAGING_CHUNKS=chunks,
        MAX_DRIVER_STAGING_CHUNK_MIB=mib,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(expected)


def test_cpu_capabilities():
    caps = CPU()._capabilities()
    assert caps["stream_memory_operations"] is True
    assert caps["python_host_functions_run_on"] == "worker threads"


def test_no_cleanup_failures_after_churn(acc, rec):
    for _ in range(200):
        q = DeviceQueue(acc)
        getattr(q, ENQ)(rec.fn(1))
        q.record_event()
        CompletionFlag(acc)
        del q
    acc.synchronize(timeout=WAIT)
    count, last = core._cleanup_failures()
    assert count == 0, last
