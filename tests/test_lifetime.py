"""Object lifetime, leaks and interpreter exit (SPEC §6 lifetime, §8, §10)."""

from __future__ import annotations

import gc
import os
import threading
import time

import pytest

from max.driver import CompletionFlag, DeviceEvent, DeviceQueue

WAIT = 20.0
NOT_YET = 0.1
ENQ = "__unsafe_enqueue_py_host_func"
ENQ_ASYNC = "__unsafe_enqueue_async_py_host_func"


def _enq(target, fn):
    getattr(target, ENQ)(fn)


def test_dropped_queue_still_runs_its_work(cpu):
    q = DeviceQueue(cpu)
    f = CompletionFlag(cpu)
    q.wait_for_host_value(f, 1)
    ran = threading.Event()
    _enq(q, ran.set)
    del q
    gc.collect()
    time.sleep(NOT_YET)
    assert not ran.is_set()
    f.signal(1)
    assert ran.wait(WAIT)


def test_dropped_queue_work_ungated(cpu):
    ran = []
    done = threading.Event()
    for i in range(50):
        q = DeviceQueue(cpu)
        _enq(q, lambda i=i: ran.append(i))
        if i == 49:
            _enq(q, done.set)
        del q
    gc.collect()
    assert done.wait(WAIT)
    cpu.synchronize(timeout=WAIT)
    assert sorted(ran) == list(range(50))


def test_event_outlives_its_queue(cpu):
    q = DeviceQueue(cpu)
    f = CompletionFlag(cpu)
    q.wait_for_host_value(f, 1)
    ev = q.record_event()
    del q
    gc.collect()
    assert not ev.is_ready()
    f.signal(1)
    ev.synchronize(timeout=WAIT)
    assert ev.is_ready()


def test_dropped_event_used_by_pending_wait(cpu, gate, rec):
    qa, qb = DeviceQueue(cpu), DeviceQueue(cpu)
    fa = gate(qa)
    ev = qa.record_event()
    qb.wait_for(ev)
    del ev
    gc.collect()
    _enq(qb, rec.fn("b"))
    time.sleep(NOT_YET)
    assert not rec.has("b")
    fa.signal(1)
    qb.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["b"]


def test_dropped_explicit_event_used_by_pending_wait(cpu, gate, rec):
    qa, qb = DeviceQueue(cpu), DeviceQueue(cpu)
    fa = gate(qa)
    ev = DeviceEvent(cpu, enable_timing=True)
    qa.record_event(ev)
    qb.wait_for(event=ev)
    del ev
    gc.collect()
    _enq(qb, rec.fn("b"))
    fa.signal(1)
    qb.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["b"]


def test_dropped_waited_queue(cpu, rec):
    qa, qb = DeviceQueue(cpu), DeviceQueue(cpu)
    f = CompletionFlag(cpu)
    qa.wait_for_host_value(f, 1)
    _enq(qa, rec.fn("a"))
    qb.wait_for(stream=qa)
    del qa
    gc.collect()
    _enq(qb, rec.fn("b"))
    time.sleep(NOT_YET)
    assert rec.snapshot() == []
    f.signal(1)
    qb.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["a", "b"]


def test_dropped_flag_used_by_gate_and_async_fn(cpu, rec):
    """The worker signals a flag whose last Python reference is gone; the
    gate that waits on it must still see the value."""
    q = DeviceQueue(cpu)
    f = CompletionFlag(cpu)
    release = threading.Event()
    getattr(q, ENQ_ASYNC)(lambda: release.wait(WAIT), f, 3, cpu)
    q.wait_for_host_value(f, 3)
    _enq(q, rec.fn("after"))
    del f
    gc.collect()
    time.sleep(NOT_YET)
    assert not rec.has("after")
    release.set()
    q.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["after"]


def test_dropped_flag_signalled_from_host_function(cpu, rec):
    qa, qb = DeviceQueue(cpu), DeviceQueue(cpu)
    f = CompletionFlag(cpu)
    qb.wait_for_host_value(f, 2)
    _enq(qb, rec.fn("b"))
    release = threading.Event()
    holder = [f]

    def signaller():
        release.wait(WAIT)
        holder.pop().signal(2)

    _enq(qa, signaller)
    del f
    release.set()
    qb.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["b"]


def test_dropped_everything_then_device_sync(cpu):
    ran = threading.Event()

    def make():
        q = DeviceQueue(cpu)
        f = CompletionFlag(cpu)
        ev = DeviceEvent(cpu)
        q.record_event(ev)
        _enq(q, lambda: f.signal(1))
        q.wait_for_host_value(f, 1)
        q.wait_for(ev)
        _enq(q, ran.set)

    make()
    gc.collect()
    cpu.synchronize(timeout=WAIT)
    assert ran.is_set()


# --------------------------------------------------------------------------
# Leaks


def _threads():
    return len(os.listdir("/proc/self/task"))


def _rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")  # pragma: no cover


def _noop():
    pass


def _churn_queues(cpu, n, max_seen):
    for i in range(n):
        q = DeviceQueue(cpu)
        q.wait_for(cpu.default_queue)
        q.record_event()
        if i % 10 == 0:
            _enq(q, _noop)
        del q
        if i % 500 == 499:
            cpu.synchronize(timeout=WAIT)
            max_seen[0] = max(max_seen[0], _threads())


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc")
@pytest.mark.skipif(
    os.environ.get("MAX_DRIVER_SANITIZER") == "asan",
    reason="ASan's quarantine keeps freed memory: RSS growth would not be ours",
)
def test_no_thread_or_memory_growth(cpu, wait_until):
    max_seen = [0]
    q = DeviceQueue(cpu)
    ev = DeviceEvent(cpu)
    # Warm up: caches, pools, allocator arenas.
    _churn_queues(cpu, 1000, max_seen)
    for _ in range(100_000):
        q.record_event()
    for _ in range(10_000):
        q.record_event(ev)
    cpu.synchronize(timeout=WAIT)
    gc.collect()
    rss0, threads0 = _rss_bytes(), _threads()

    _churn_queues(cpu, 9000, max_seen)
    for _ in range(1_000_000):
        q.record_event()
    for _ in range(100_000):
        q.record_event(ev)
    cpu.synchronize(timeout=WAIT)
    gc.collect()

    growth = _rss_bytes() - rss0
    assert growth < 50 * 2**20, f"RSS grew by {growth / 2**20:.1f} MiB"
    assert max_seen[0] < 600, f"{max_seen[0]} threads while churning queues"
    # Idle worker threads may take a moment to exit.
    assert wait_until(lambda: _threads() <= threads0 + 16, timeout=WAIT), (
        f"threads {threads0} -> {_threads()}"
    )


@pytest.mark.timeout(120)
def test_1000_live_queues_work(cpu):
    queues = [DeviceQueue(cpu) for _ in range(1000)]
    hits = []
    for i, q in enumerate(queues):
        _enq(q, lambda i=i: hits.append(i))
    for q in queues:
        q.synchronize(timeout=WAIT)
    assert sorted(hits) == list(range(1000))


def test_many_flags_and_events_collected(cpu):
    # Creating and dropping many objects must not keep them (or crash).
    for _ in range(20_000):
        CompletionFlag(cpu)
        DeviceEvent(cpu)
    gc.collect()
    f = CompletionFlag(cpu)
    assert f.load() == 0


# --------------------------------------------------------------------------
# Interpreter exit


EXIT_CHILD = r"""
import sys, threading, time
from max.driver import CPU, CompletionFlag, DeviceQueue
ENQ = "__unsafe_enqueue_py_host_func"
cpu = CPU()
scenario = sys.argv[1]
if scenario == "gated":
    q = DeviceQueue(cpu)
    f = CompletionFlag(cpu)
    q.wait_for_host_value(f, 1)
    getattr(q, ENQ)(lambda: print("GATED-RAN", flush=True))
    g = CompletionFlag(cpu)
    cpu.default_queue.wait_for_host_value(g, 5)
    getattr(cpu, ENQ)(lambda: print("GATED-RAN", flush=True))
elif scenario == "sync_sleeping":
    q = DeviceQueue(cpu)
    started = threading.Event()
    def sleeper():
        started.set()
        time.sleep(60)
    getattr(q, ENQ)(sleeper)
    getattr(q, ENQ)(lambda: print("NOT-STARTED-RAN", flush=True))
    assert started.wait(20)
elif scenario == "async_sleeping":
    q = DeviceQueue(cpu)
    f = CompletionFlag(cpu)
    started = threading.Event()
    def sleeper():
        started.set()
        time.sleep(60)
    getattr(q, "__unsafe_enqueue_async_py_host_func")(sleeper, f, 1, cpu)
    q.wait_for_host_value(f, 1)
    getattr(q, ENQ)(lambda: print("NOT-STARTED-RAN", flush=True))
    assert started.wait(20)
elif scenario == "dropped":
    def make():
        q = DeviceQueue(cpu)
        f = CompletionFlag(cpu)
        q.wait_for_host_value(f, 1)
        getattr(q, ENQ)(lambda: print("GATED-RAN", flush=True))
        q.record_event()
    for _ in range(100):
        make()
print("EXITING", flush=True)
"""


@pytest.mark.parametrize(
    "scenario", ["gated", "sync_sleeping", "async_sleeping", "dropped"]
)
def test_interpreter_exit_with_pending_work(run_py, scenario):
    code = EXIT_CHILD.replace("sys.argv[1]", repr(scenario))
    r = run_py(code, timeout=40)  # sleepers sleep 60 s: exit must not wait
    assert r.returncode == 0, r.stderr
    assert "EXITING" in r.stdout
    assert "RAN" not in r.stdout, r.stdout
    assert "Fatal Python error" not in r.stderr, r.stderr
    assert "Traceback" not in r.stderr, r.stderr
