"""Blocking waits on an accelerator: GIL release, timeouts, Ctrl-C
(SPEC §8, §10)."""

from __future__ import annotations

import select
import signal
import threading
import time

import pytest
from accel_support import ENQ, NOT_YET, WAIT

from max.driver import CompletionFlag, DeviceEvent, DeviceQueue

KINDS = ["queue", "event", "device"]


def _waiter(kind, dev, queue):
    if kind == "queue":
        return queue.synchronize
    if kind == "event":
        return queue.record_event().synchronize
    return dev.synchronize


@pytest.mark.parametrize("kind", KINDS)
def test_wait_releases_gil(acc, aq, kind):
    """The gate only opens after a Python thread did Python work, and the
    work behind the gate is a Python host function: both need the GIL while
    the main thread waits."""
    f = CompletionFlag(acc)
    aq.wait_for_host_value(f, 1)
    ran = []
    getattr(aq, ENQ)(lambda: ran.append(1))
    wait = _waiter(kind, acc, aq)
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


@pytest.mark.parametrize("kind", KINDS)
def test_other_threads_progress_during_timed_out_wait(acc, aq, gate, kind):
    gate(aq)
    wait = _waiter(kind, acc, aq)
    stop = threading.Event()
    started = threading.Event()
    counter = [0]

    def spinner():
        started.set()
        while not stop.is_set():
            counter[0] += 1

    t = threading.Thread(target=spinner)
    t.start()
    try:
        started.wait(WAIT)
        c0 = counter[0]
        with pytest.raises(TimeoutError):
            wait(timeout=0.3)
        c1 = counter[0]
    finally:
        stop.set()
        t.join(WAIT)
    assert c1 - c0 > 1000


@pytest.mark.parametrize("kind", KINDS)
def test_timeout_raises_and_work_stays_enqueued(acc, aq, rec, kind):
    f = CompletionFlag(acc)
    aq.wait_for_host_value(f, 1)
    getattr(aq, ENQ)(rec.fn("x"))
    wait = _waiter(kind, acc, aq)
    try:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError):
            wait(timeout=0.1)
        assert time.monotonic() - t0 >= 0.09  # honoured, not cut short
        with pytest.raises(TimeoutError):
            wait(timeout=0)
        assert not rec.has("x")
    finally:
        f.signal(1)
    assert wait(timeout=WAIT) is None
    aq.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["x"]


@pytest.mark.parametrize("kind", KINDS)
def test_timeout_zero_when_idle(acc, aq, kind):
    wait = _waiter(kind, acc, aq)
    aq.synchronize(timeout=WAIT)
    assert wait(timeout=0) is None
    assert wait(timeout=0.0) is None
    assert wait(None) is None
    assert wait() is None


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("huge", [1e300, float("inf"), 2**70])
def test_timeout_too_large_to_represent_waits(acc, aq, kind, huge):
    """A timeout beyond any clock (e.g. 1e300 s) is a wait without one."""
    flag = CompletionFlag(acc)
    aq.wait_for_host_value(flag, 1)
    wait = _waiter(kind, acc, aq)
    timer = threading.Timer(0.2, flag.signal, args=(1,))
    timer.start()
    try:
        assert wait(timeout=huge) is None
    finally:
        timer.join()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("neg", [-1, -0.001, float("-inf")])
def test_negative_timeout_value_error(acc, aq, kind, neg):
    with pytest.raises(ValueError):
        _waiter(kind, acc, aq)(timeout=neg)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("bad", ["1", [1], object()])
def test_non_number_timeout_type_error(acc, aq, kind, bad):
    with pytest.raises(TypeError):
        _waiter(kind, acc, aq)(timeout=bad)


def test_concurrent_waiters(acc, aq, gate):
    f = gate(aq)
    results = []
    lock = threading.Lock()

    def waiter(kind):
        try:
            _waiter(kind, acc, aq)(timeout=WAIT)
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


def test_unrecorded_event_wait(acc):
    assert DeviceEvent(acc).synchronize(timeout=0) is None


def test_waits_on_two_devices_from_two_threads(acc, acc1, rec):
    q0, q1 = DeviceQueue(acc), DeviceQueue(acc1)
    f0, f1 = CompletionFlag(acc), CompletionFlag(acc1)
    q0.wait_for_host_value(f0, 1)
    q1.wait_for_host_value(f1, 1)
    getattr(q0, ENQ)(rec.fn(0))
    getattr(q1, ENQ)(rec.fn(1))
    errors = []

    def wait(dev):
        try:
            dev.synchronize(timeout=WAIT)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(repr(exc))

    ts = [threading.Thread(target=wait, args=(d,)) for d in (acc, acc1)]
    for t in ts:
        t.start()
    try:
        f1.signal(1)
        assert rec.wait(1)
        f0.signal(1)
    finally:
        f0.signal(1)
        f1.signal(1)
    for t in ts:
        t.join(WAIT)
    assert errors == []
    assert rec.snapshot() == [1, 0]


# --------------------------------------------------------------------------
# Ctrl-C


CTRL_C_CHILD = r"""
import sys, time
from max.driver import Accelerator, CompletionFlag, DeviceQueue
kind = sys.argv[1]
acc = Accelerator()
q = DeviceQueue(acc)
f = CompletionFlag(acc)
q.wait_for_host_value(f, 1)
ran = []
getattr(q, "__unsafe_enqueue_py_host_func")(lambda: ran.append(1))
if kind == "queue":
    wait = q.synchronize
elif kind == "event":
    wait = q.record_event().synchronize
else:
    wait = acc.synchronize
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
def test_ctrl_c_interrupts_gated_wait(kind, popen_acc_py):
    proc = popen_acc_py(CTRL_C_CHILD, kind)
    try:
        line = _readline(proc, 30)
        assert line is not None and line.strip() == "READY", (
            line,
            proc.stderr.read() if proc.poll() is not None else "",
        )
        time.sleep(0.3)  # let the child enter the wait
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "INTERRUPTED" in out and "NOT-INTERRUPTED" not in out, out + err
    latency = float(out.split("INTERRUPTED", 1)[1].split()[0])
    assert latency < 10.0, out  # far below the child's 120 s timeout
    assert "RAN [1]" in out, out + err
