"""Blocking waits: GIL release, timeouts, Ctrl-C (SPEC §8, §10)."""

from __future__ import annotations

import select
import signal
import threading
import time

import pytest

from max.driver import CompletionFlag, DeviceEvent, DeviceQueue

WAIT = 20.0
NOT_YET = 0.1
ENQ = "__unsafe_enqueue_py_host_func"
KINDS = ["queue", "event", "device"]


def _waiter(kind, cpu, queue):
    """The blocking call of ``kind`` that covers everything on ``queue``."""
    if kind == "queue":
        return queue.synchronize
    if kind == "event":
        return queue.record_event().synchronize
    return cpu.synchronize


# --------------------------------------------------------------------------
# GIL


@pytest.mark.parametrize("kind", KINDS)
def test_wait_releases_gil(cpu, kind):
    """The only way the gate opens is a Python thread doing Python work and
    then signalling, and the work behind the gate is a Python host function:
    both need the GIL while the main thread is inside the wait."""
    q = DeviceQueue(cpu)
    f = CompletionFlag(cpu)
    q.wait_for_host_value(f, 1)
    ran = []
    getattr(q, ENQ)(lambda: ran.append(1))
    wait = _waiter(kind, cpu, q)
    counter = [0]

    def spinner():
        for _ in range(200_000):
            counter[0] += 1
        f.signal(1)

    t = threading.Thread(target=spinner)
    try:
        t.start()
        wait(timeout=WAIT)
    finally:
        f.signal(1)
        t.join(WAIT)
    assert counter[0] == 200_000
    assert ran == [1]
    q.synchronize(timeout=WAIT)
    assert ran == [1]


@pytest.mark.parametrize("kind", KINDS)
def test_other_threads_progress_during_timed_out_wait(cpu, queue, gate, kind):
    gate(queue)
    wait = _waiter(kind, cpu, queue)
    stop = threading.Event()
    counter = [0]
    in_wait = threading.Event()

    def spinner():
        in_wait.wait(WAIT)
        while not stop.is_set():
            counter[0] += 1

    t = threading.Thread(target=spinner)
    t.start()
    try:
        in_wait.set()
        c0 = counter[0]
        with pytest.raises(TimeoutError):
            wait(timeout=0.3)
        c1 = counter[0]
    finally:
        stop.set()
        t.join(WAIT)
    assert c1 - c0 > 1000


# --------------------------------------------------------------------------
# Timeouts


@pytest.mark.parametrize("kind", KINDS)
def test_timeout_raises_and_work_stays_enqueued(cpu, queue, rec, kind):
    f = CompletionFlag(cpu)
    queue.wait_for_host_value(f, 1)
    getattr(queue, ENQ)(rec.fn("x"))
    wait = _waiter(kind, cpu, queue)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        wait(timeout=0.1)
    assert time.monotonic() - t0 >= 0.09  # the timeout was honoured, not cut short
    with pytest.raises(TimeoutError):
        wait(timeout=0.1)
    assert not rec.has("x")
    f.signal(1)
    assert wait(timeout=WAIT) is None
    queue.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["x"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("zero", [0, 0.0])
def test_timeout_zero_with_pending_work(cpu, queue, gate, kind, zero):
    f = gate(queue)
    wait = _waiter(kind, cpu, queue)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        wait(timeout=zero)
    assert time.monotonic() - t0 < 5.0  # hang guard, not a speed check
    f.signal(1)
    wait(timeout=WAIT)


@pytest.mark.parametrize("kind", KINDS)
def test_timeout_zero_when_idle(cpu, queue, kind):
    wait = _waiter(kind, cpu, queue)
    queue.synchronize(timeout=WAIT)
    cpu.synchronize(timeout=WAIT)
    assert wait(timeout=0) is None
    assert wait(timeout=0.0) is None
    assert wait(timeout=None) is None
    assert wait(None) is None
    assert wait() is None
    assert wait(timeout=3) is None


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("neg", [-1, -0.001, -1e300, float("-inf")])
def test_negative_timeout_value_error(cpu, queue, kind, neg):
    wait = _waiter(kind, cpu, queue)
    with pytest.raises(ValueError):
        wait(timeout=neg)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bad", ["1", b"1", [1], object(), 1j])
def test_non_number_timeout_type_error(cpu, queue, kind, bad):
    wait = _waiter(kind, cpu, queue)
    with pytest.raises(TypeError):
        wait(timeout=bad)
    with pytest.raises(TypeError):
        wait(bad)


@pytest.mark.parametrize("kind", KINDS)
def test_wait_arity(cpu, queue, kind):
    wait = _waiter(kind, cpu, queue)
    with pytest.raises(TypeError):
        wait(1, 2)
    with pytest.raises(TypeError):
        wait(time_out=1)


def test_bad_timeout_changes_nothing(cpu, queue, gate, rec):
    f = gate(queue)
    getattr(queue, ENQ)(rec.fn("x"))
    with pytest.raises(ValueError):
        queue.synchronize(timeout=-1)
    with pytest.raises(TypeError):
        queue.synchronize(timeout="1")
    assert not rec.has("x")
    f.signal(1)
    queue.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["x"]


# --------------------------------------------------------------------------
# device.synchronize covers every queue


def test_device_synchronize_waits_for_all_queues(cpu, rec):
    q1, q2 = DeviceQueue(cpu), DeviceQueue(cpu)
    f1, f2, fd = CompletionFlag(cpu), CompletionFlag(cpu), CompletionFlag(cpu)
    for q, f, name in ((q1, f1, "q1"), (q2, f2, "q2"), (cpu.default_queue, fd, "d")):
        q.wait_for_host_value(f, 1)
        getattr(q, ENQ)(rec.fn(name))
    try:
        with pytest.raises(TimeoutError):
            cpu.synchronize(timeout=0.1)
        f1.signal(1)
        assert rec.wait("q1")
        with pytest.raises(TimeoutError):
            cpu.synchronize(timeout=0.1)
        fd.signal(1)
        assert rec.wait("d")
        with pytest.raises(TimeoutError):
            cpu.synchronize(timeout=0.1)
        f2.signal(1)
        assert cpu.synchronize(timeout=WAIT) is None
        assert sorted(rec.snapshot()) == ["d", "q1", "q2"]
    finally:
        for f in (f1, f2, fd):
            f.signal(1)


def test_device_synchronize_includes_dropped_queue(cpu, rec):
    q = DeviceQueue(cpu)
    f = CompletionFlag(cpu)
    q.wait_for_host_value(f, 1)
    getattr(q, ENQ)(rec.fn("x"))
    del q
    try:
        with pytest.raises(TimeoutError):
            cpu.synchronize(timeout=0.1)
    finally:
        f.signal(1)
    cpu.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["x"]


def test_concurrent_waiters_on_one_queue(cpu, queue, gate):
    f = gate(queue)
    results = []
    lock = threading.Lock()

    def waiter(kind):
        try:
            _waiter(kind, cpu, queue)(timeout=WAIT)
            r = "ok"
        except Exception as exc:  # pragma: no cover - reported below
            r = repr(exc)
        with lock:
            results.append(r)

    threads = [threading.Thread(target=waiter, args=(k,)) for k in KINDS * 3]
    for t in threads:
        t.start()
    time.sleep(NOT_YET)
    with lock:
        assert results == []
    f.signal(1)
    for t in threads:
        t.join(WAIT)
    assert results == ["ok"] * len(threads)


def test_unrecorded_event_wait(cpu):
    assert DeviceEvent(cpu).synchronize(timeout=0) is None


# --------------------------------------------------------------------------
# Ctrl-C


CTRL_C_CHILD = r"""
import sys, time
from max.driver import CPU, CompletionFlag, DeviceQueue
kind = sys.argv[1]
cpu = CPU()
q = DeviceQueue(cpu)
f = CompletionFlag(cpu)
q.wait_for_host_value(f, 1)
ran = []
getattr(q, "__unsafe_enqueue_py_host_func")(lambda: ran.append(1))
if kind == "queue":
    wait = q.synchronize
elif kind == "event":
    wait = q.record_event().synchronize
else:
    wait = cpu.synchronize
print("READY", flush=True)
t0 = time.monotonic()
try:
    wait(timeout=120)
    print("NOT-INTERRUPTED", flush=True)
except KeyboardInterrupt:
    print("INTERRUPTED %.3f" % (time.monotonic() - t0), flush=True)
# The enqueued work was left in place and still runs.
f.signal(1)
q.synchronize(timeout=20)
print("RAN", ran, flush=True)
"""


def _readline(proc, timeout):
    r, _, _ = select.select([proc.stdout], [], [], timeout)
    if not r:
        return None
    return proc.stdout.readline()


@pytest.mark.parametrize("kind", KINDS)
def test_ctrl_c_interrupts_wait(kind, popen_py):
    proc = popen_py(CTRL_C_CHILD, kind)
    try:
        line = _readline(proc, 30)
        assert line is not None and line.strip() == "READY", (
            line,
            proc.stderr.read() if proc.poll() is not None else "",
        )
        time.sleep(0.3)  # let the child enter the wait
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "INTERRUPTED" in out and "NOT-INTERRUPTED" not in out, out + err
    # Seconds from READY to the KeyboardInterrupt: about 0.3 s of the parent's
    # pause plus the reaction time; far below the child's 120 s timeout.
    latency = float(out.split("INTERRUPTED", 1)[1].split()[0])
    assert latency < 5.0, out
    assert "RAN [1]" in out, out + err


def test_custom_signal_handler_exception_propagates(run_py):
    code = r"""
import signal, threading, os
from max.driver import CPU, CompletionFlag, DeviceQueue
class Custom(Exception):
    pass
def handler(signum, frame):
    raise Custom("from handler")
signal.signal(signal.SIGUSR1, handler)
cpu = CPU()
q = DeviceQueue(cpu)
f = CompletionFlag(cpu)
q.wait_for_host_value(f, 1)
threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGUSR1)).start()
try:
    q.synchronize(timeout=60)
    print("NOT-INTERRUPTED")
except Custom as e:
    print("CUSTOM", e)
f.signal(1)
q.synchronize(timeout=20)
"""
    r = run_py(code, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "CUSTOM from handler" in r.stdout, r.stdout + r.stderr
