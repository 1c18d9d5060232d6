"""Lifetime and process edges (SPEC §6 lifetime, §8, §10).

Extends test_lifetime.py and test_waits.py: objects used after whatever
they were made from is gone, interpreter exit while threads wait, os.fork()
in a process that has used the driver, many threads at once, and Ctrl-C in
every kind of wait (with and without a timeout).

Everything that can hang or crash runs in a child interpreter with a
timeout, so that a bug fails one test (with the child's output) instead of
the whole run.  Sleeps only show that something has NOT happened.
"""

from __future__ import annotations

import gc
import select
import subprocess
import threading
import time

import pytest

from max.driver import CPU, CompletionFlag, DeviceEvent, DeviceQueue

WAIT = 20.0
NOT_YET = 0.1
ENQ = "__unsafe_enqueue_py_host_func"
ENQ_ASYNC = "__unsafe_enqueue_async_py_host_func"

# Text that must never appear on a child's stderr.
ALARMING = (
    "Fatal Python error",
    "Traceback",
    "Segmentation fault",
    "Aborted",
    "terminate called",
    "core dumped",
)


def _enq(target, fn):
    getattr(target, ENQ)(fn)


def _assert_quiet(stderr):
    for word in ALARMING:
        assert word not in stderr, stderr[-3000:]


def _readline(proc, timeout):
    r, _, _ = select.select([proc.stdout], [], [], timeout)
    if not r:
        return None
    return proc.stdout.readline()


def _finish(proc, timeout):
    """communicate() with a bound; kills the child when it is exceeded."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"child did not finish within {timeout} s\n{out}\n{err}")
    return out, err


# --------------------------------------------------------------------------
# Objects used after what made them is gone


def test_event_from_dropped_queue_is_still_usable(cpu, gate, rec):
    """An event recorded on a queue that was then dropped (while the
    recorded point was still pending) answers is_ready, synchronize, can be
    waited for by another queue, measured and re-recorded."""
    q = DeviceQueue(cpu)
    f = gate(q)
    start = DeviceEvent(cpu, enable_timing=True)
    end = DeviceEvent(cpu, enable_timing=True)
    q.record_event(start)
    _enq(q, rec.fn("a"))
    q.record_event(end)
    plain = q.record_event()
    del q
    gc.collect()

    other = DeviceQueue(cpu)
    other.wait_for(event=end)
    _enq(other, rec.fn("b"))
    time.sleep(NOT_YET)
    assert not plain.is_ready() and not end.is_ready()
    assert not rec.has("b")
    with pytest.raises(TimeoutError):
        plain.synchronize(timeout=0)

    f.signal(1)
    end.synchronize(timeout=WAIT)
    plain.synchronize(timeout=WAIT)
    other.synchronize(timeout=WAIT)
    assert plain.is_ready() and start.is_ready() and end.is_ready()
    assert rec.snapshot() == ["a", "b"]
    assert start.elapsed_time(end) >= 0.0
    assert start.device == cpu and plain.device is cpu

    # Re-recording an event of a dead queue on a new queue works.
    q2 = DeviceQueue(cpu)
    q2.record_event(plain)
    plain.synchronize(timeout=WAIT)
    assert plain.is_ready()


def test_event_of_dropped_queue_waited_by_dropped_queue(cpu, rec):
    """Recording queue, event and waiting queue are all dropped while the
    wait is pending; the waiter's work runs once the gate opens."""
    qa, qb = DeviceQueue(cpu), DeviceQueue(cpu)
    f = CompletionFlag(cpu)
    qa.wait_for_host_value(f, 1)
    _enq(qa, rec.fn("a"))
    ev = qa.record_event()
    qb.wait_for(ev)
    _enq(qb, rec.fn("b"))
    del qa, qb, ev
    gc.collect()
    time.sleep(NOT_YET)
    assert rec.snapshot() == []
    f.signal(1)
    cpu.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["a", "b"]


DEFAULT_QUEUE_CHILD = r"""
import gc, threading
from max.driver import CPU, CompletionFlag, DeviceEvent, DeviceQueue
ENQ = "__unsafe_enqueue_py_host_func"

def churn():
    cpu = CPU()
    for i in range(200):
        q = DeviceQueue(cpu)
        f = CompletionFlag(cpu)
        ev = DeviceEvent(cpu)
        getattr(q, ENQ)(lambda f=f: f.signal(1))
        q.wait_for_host_value(f, 1)
        q.record_event(ev)
        cpu.default_queue.wait_for(ev)
    return cpu.default_queue

dq = churn()
gc.collect()
# Only the default queue (and the cached CPU device behind it) is left.
ran = []
getattr(dq, ENQ)(lambda: ran.append("x"))
ev = dq.record_event()
other = DeviceQueue(dq.device)
other.wait_for(dq)
other.wait_for(device=dq.device)
getattr(other, ENQ)(lambda: ran.append("y"))
f = CompletionFlag(dq.device)
dq.wait_for_host_value(f, 3)
getattr(dq, ENQ)(lambda: ran.append("z"))
f.signal(3)
ev.synchronize(timeout=20)
dq.synchronize(timeout=20)
other.synchronize(timeout=20)
assert dq.device is CPU(), dq.device
assert dq is CPU().default_queue
assert ran[0] == "x" and sorted(ran[1:]) == ["y", "z"], ran
CPU().synchronize(timeout=20)
print("OK", flush=True)
"""


def test_default_queue_after_everything_else_is_gone(run_py):
    r = run_py(DEFAULT_QUEUE_CHILD, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "OK" in r.stdout
    _assert_quiet(r.stderr)


FLAG_SLOT_CHILD = r"""
import ctypes, gc, threading, time
from max.driver import CPU, CompletionFlag, DeviceQueue
cpu = CPU()
q = DeviceQueue(cpu)
f = CompletionFlag(cpu)
ptr = f.device_ptr
slot = ctypes.c_uint64.from_address(ptr)
q.wait_for_host_value(f, 1)
ran = threading.Event()
getattr(q, "__unsafe_enqueue_py_host_func")(ran.set)
del f
gc.collect()
# Some churn so that a freed slot would likely be reused.
junk = [CompletionFlag(cpu) for _ in range(64)]
time.sleep(0.1)
assert not ran.is_set(), "gate opened without a signal"
assert slot.value == 0, slot.value
slot.value = 1  # the write a device (or C code) would do through device_ptr
assert ran.wait(20), "queue did not see the value written through device_ptr"
q.synchronize(timeout=20)
assert all(j.load() == 0 for j in junk), "another flag shares the slot"
print("OK", flush=True)
"""


def test_dropped_flag_slot_stays_valid_for_waiting_queue(run_py):
    """A flag dropped while a queue waits on it: the slot stays valid, and a
    write through the old ``device_ptr`` releases the queue (on CPU the core
    re-reads the slot at least every 50 ms)."""
    r = run_py(FLAG_SLOT_CHILD, timeout=60)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "OK" in r.stdout
    _assert_quiet(r.stderr)


def test_flag_written_through_device_ptr_before_drop(cpu, rec):
    import ctypes

    q = DeviceQueue(cpu)
    f = CompletionFlag(cpu)
    q.wait_for_host_value(f, 7)
    _enq(q, rec.fn("after"))
    ctypes.c_uint64.from_address(f.device_ptr).value = 7
    del f
    gc.collect()
    q.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["after"]


# --------------------------------------------------------------------------
# Interpreter exit


EXIT_CHILD = r"""
import sys, threading, time
from max.driver import CPU, CompletionFlag, DeviceQueue
ENQ = "__unsafe_enqueue_py_host_func"
ENQ_ASYNC = "__unsafe_enqueue_async_py_host_func"
scenario = sys.argv[1]
cpu = CPU()
started = threading.Event()

def sleeper():
    started.set()
    time.sleep(60)

def workload():
    # A gated queue with a host function pending behind the gate.
    q = DeviceQueue(cpu)
    f = CompletionFlag(cpu)
    q.wait_for_host_value(f, 1)
    getattr(q, ENQ)(lambda: print("GATED-RAN", flush=True))
    # A sleeping async host function and work gated behind it.
    q2 = DeviceQueue(cpu)
    g = CompletionFlag(cpu)
    getattr(q2, ENQ_ASYNC)(sleeper, g, 1, cpu)
    q2.wait_for_host_value(g, 1)
    getattr(q2, ENQ)(lambda: print("AFTER-SLEEPER-RAN", flush=True))
    # Pending host work on the default queue, behind a gate of its own.
    h = CompletionFlag(cpu)
    cpu.default_queue.wait_for_host_value(h, 9)
    getattr(cpu, ENQ)(lambda: print("DEFAULT-RAN", flush=True))
    return q, q2

if scenario == "main":
    keep = workload()
    assert started.wait(20)
elif scenario == "thread_started":
    t = threading.Thread(target=workload)
    t.start()
    t.join()
    assert started.wait(20)
elif scenario in ("daemon_queue_wait", "daemon_device_wait", "daemon_event_wait"):
    def waiter():
        q, q2 = workload()
        kind = scenario.split("_")[1]
        if kind == "queue":
            wait = q.synchronize
        elif kind == "event":
            wait = q.record_event().synchronize
        else:
            wait = cpu.synchronize
        waiting.set()
        wait()  # never returns: the process exits under it
        print("WAIT-RETURNED", flush=True)
    waiting = threading.Event()
    threading.Thread(target=waiter, daemon=True).start()
    assert waiting.wait(20) and started.wait(20)
    time.sleep(0.2)  # let the daemon enter the wait
elif scenario == "sys_exit":
    keep = workload()
    assert started.wait(20)
    print("EXITING %.6f" % time.monotonic(), flush=True)
    sys.exit(0)
print("EXITING %.6f" % time.monotonic(), flush=True)
"""


@pytest.mark.parametrize(
    "scenario",
    [
        "main",
        "thread_started",
        "daemon_queue_wait",
        "daemon_device_wait",
        "daemon_event_wait",
        "sys_exit",
    ],
)
def test_exit_promptly_with_gated_and_sleeping_work(popen_py, scenario):
    """Gated queue + pending host function + sleeping async host function
    (and, for daemon_*, a daemon thread blocked in a wait without timeout):
    the interpreter exits within 5 s of its last statement, status 0,
    nothing alarming on stderr, and work that had not started is dropped."""
    proc = popen_py(EXIT_CHILD.replace("sys.argv[1]", repr(scenario)))
    try:
        line = _readline(proc, 40)
        assert line is not None and line.startswith("EXITING"), (
            line,
            proc.stderr.read() if proc.poll() is not None else "",
        )
        t_exit = float(line.split()[1])
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("interpreter did not exit within 30 s")
        t_done = time.monotonic()  # CLOCK_MONOTONIC is system-wide on Linux
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err[-3000:]
    assert t_done - t_exit < 5.0, f"exit took {t_done - t_exit:.2f} s"
    assert "RAN" not in out and "RETURNED" not in out, out
    _assert_quiet(err)


# --------------------------------------------------------------------------
# os.fork()
#
# Contract (being implemented): in a forked child, objects made before the
# fork raise RuntimeError naming os.fork() where they would need the
# parent's worker threads; new objects (CPU(), DeviceQueue(CPU()), flags,
# events, host functions) work.  The child never hangs.

FORK_CHILD = r"""
import os, signal, sys, threading, time, warnings
warnings.simplefilter("ignore")
from max.driver import CPU, CompletionFlag, DeviceEvent, DeviceQueue
ENQ = "__unsafe_enqueue_py_host_func"
ENQ_ASYNC = "__unsafe_enqueue_async_py_host_func"
scenario = sys.argv[1]

cpu = CPU()
q = DeviceQueue(cpu)
ev = DeviceEvent(cpu)
flag = CompletionFlag(cpu)
old_default = cpu.default_queue
# Use everything once, so pools and worker threads exist.
ran = []
getattr(q, ENQ)(lambda: ran.append(1))
getattr(q, ENQ_ASYNC)(lambda: ran.append(2), flag, 5, cpu)
q.wait_for_host_value(flag, 5)
q.record_event(ev)
getattr(cpu, ENQ)(lambda: ran.append(3))
cpu.synchronize(timeout=20)
assert sorted(ran) == [1, 2, 3], ran

gates = []
if scenario in ("pending", "pending_sys_exit"):
    # At fork time: a gated queue with pending work, a sleeping async host
    # function on a worker, and a thread blocked in a wait.
    g = CompletionFlag(cpu)
    q.wait_for_host_value(g, 1)
    getattr(q, ENQ)(lambda: None)
    gates.append(g)
    sleeping = threading.Event()
    wake = threading.Event()
    def sleeper():
        sleeping.set()
        wake.wait(30)
    q3 = DeviceQueue(cpu)
    h = CompletionFlag(cpu)
    getattr(q3, ENQ_ASYNC)(sleeper, h, 1, cpu)
    q3.wait_for_host_value(h, 1)
    assert sleeping.wait(20)
    waiting = threading.Event()
    def waiter():
        waiting.set()
        cpu.synchronize(timeout=60)
    th = threading.Thread(target=waiter, daemon=True)
    th.start()
    assert waiting.wait(20)
    time.sleep(0.05)

results = []
first_failure = [0]

def check(code, name, fn, accept):
    print("STEP", name, flush=True)
    try:
        value = fn()
        outcome, ok = "returned %r" % (value,), accept("ok", None)
    except Exception as e:
        outcome = "raised %s: %s" % (type(e).__name__, e)
        ok = accept("exc", e)
    except BaseException as e:
        outcome = "raised BaseException %s: %s" % (type(e).__name__, e)
        ok = False
    print("CHECK %s %s %s" % (name, "OK" if ok else "FAIL", outcome), flush=True)
    if not ok and not first_failure[0]:
        first_failure[0] = code

def must_work(kind, e):
    return kind == "ok"

def fork_error(e):
    return isinstance(e, RuntimeError) and "fork" in str(e)

def must_raise_fork(kind, e):
    return kind == "exc" and fork_error(e)

def work_or_fork_error(kind, e):
    return kind == "ok" or fork_error(e)

def work_or_exception(kind, e):
    return True  # anything but a hang or a crash

def new_objects():
    c = CPU()
    assert c is CPU() and c.api == "cpu"
    nq = DeviceQueue(c)
    out = []
    getattr(nq, ENQ)(lambda: out.append("hostfn"))
    nq.synchronize(timeout=5)
    nf = CompletionFlag(c)
    nq.wait_for_host_value(nf, 2)
    getattr(nq, ENQ)(lambda: out.append("gated"))
    nf.signal(2)
    nq.synchronize(timeout=5)
    af = CompletionFlag(c)
    getattr(nq, ENQ_ASYNC)(lambda: out.append("async"), af, 4, c)
    nq.wait_for_host_value(af, 4)
    nev = nq.record_event()
    nq2 = DeviceQueue(c)
    nq2.wait_for(nev)
    getattr(nq2, ENQ)(lambda: out.append("after-event"))
    nq2.synchronize(timeout=5)
    nev.synchronize(timeout=5)
    assert out == ["hostfn", "gated", "async", "after-event"], out
    return out

def child_main():
    check(10, "new-objects", new_objects, must_work)
    if scenario == "new_only":
        return
    check(20, "prefork-queue-synchronize", lambda: q.synchronize(), must_raise_fork)
    check(21, "prefork-queue-enqueue",
          lambda: getattr(q, ENQ)(lambda: None), must_raise_fork)
    check(22, "prefork-queue-enqueue-async",
          lambda: getattr(q, ENQ_ASYNC)(lambda: None, CompletionFlag(cpu), 1, cpu),
          must_raise_fork)
    check(23, "prefork-queue-record-event", lambda: q.record_event(),
          must_raise_fork)
    check(24, "prefork-queue-wait-for", lambda: DeviceQueue(cpu).wait_for(q),
          must_raise_fork)
    check(25, "prefork-event-is-ready", lambda: ev.is_ready(), must_raise_fork)
    check(26, "prefork-event-synchronize", lambda: ev.synchronize(timeout=5),
          must_raise_fork)
    check(27, "prefork-flag-load-signal",
          lambda: (flag.signal(9), flag.load())[1], work_or_exception)
    check(28, "prefork-default-queue-synchronize",
          lambda: cpu.default_queue.synchronize(timeout=5), work_or_exception)
    check(
        31,
        "prefork-default-queue-object",
        lambda: old_default.synchronize(timeout=5),
        work_or_fork_error,
    )
    check(29, "device-synchronize", lambda: cpu.synchronize(timeout=5),
          work_or_fork_error)
    # New objects still work after the pre-fork ones raised.
    check(30, "new-objects-again", new_objects, must_work)

pid = os.fork()
if pid == 0:
    code = 0
    try:
        child_main()
        code = first_failure[0]
    except BaseException as e:
        print("CHILD-EXC %r" % (e,), flush=True)
        code = 99
    sys.stdout.flush()
    if scenario == "pending_sys_exit":
        sys.exit(code)  # full interpreter finalization in the child
    os._exit(code)

deadline = time.monotonic() + 10
while True:
    wpid, status = os.waitpid(pid, os.WNOHANG)
    if wpid:
        break
    if time.monotonic() > deadline:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        print("CHILD-HUNG", flush=True)
        status = None
        break
    time.sleep(0.01)
if status is not None:
    print("CHILD-CODE %d" % os.waitstatus_to_exitcode(status), flush=True)
# The parent is unaffected by the fork.
for g in gates:
    g.signal(1)
if scenario in ("pending", "pending_sys_exit"):
    wake.set()
done = []
getattr(q, ENQ)(lambda: done.append(1))
cpu.synchronize(timeout=20)
assert done == [1]
print("PARENT-OK", flush=True)
"""


def _run_fork(run_py, scenario):
    r = run_py(FORK_CHILD.replace("sys.argv[1]", repr(scenario)), timeout=60)
    detail = r.stdout[-4000:] + "\n" + r.stderr[-3000:]
    assert "CHILD-HUNG" not in r.stdout, "forked child hung (>10 s):\n" + detail
    assert "CHILD-CODE 0" in r.stdout, detail
    assert "PARENT-OK" in r.stdout and r.returncode == 0, detail
    assert "Fatal Python error" not in r.stderr, detail
    return r


@pytest.mark.timeout(120)
def test_fork_child_new_cpu_objects_work(run_py):
    _run_fork(run_py, "new_only")


@pytest.mark.timeout(120)
def test_fork_child_prefork_objects_raise_fork_error(run_py):
    r = _run_fork(run_py, "idle")
    assert "CHECK prefork-queue-synchronize OK" in r.stdout


@pytest.mark.timeout(120)
def test_fork_with_pending_gated_and_sleeping_work(run_py):
    """Fork while a queue is gated, an async host function sleeps on a
    worker and a thread waits in device.synchronize: the child neither
    inherits nor waits for any of it."""
    _run_fork(run_py, "pending")


@pytest.mark.timeout(120)
def test_fork_child_exits_through_interpreter_finalization(run_py):
    _run_fork(run_py, "pending_sys_exit")


# --------------------------------------------------------------------------
# Many threads


THREADS_CHILD = r"""
import random, sys, threading, time
from max.driver import CPU, CompletionFlag, DeviceEvent, DeviceQueue
ENQ = "__unsafe_enqueue_py_host_func"
ENQ_ASYNC = "__unsafe_enqueue_async_py_host_func"
N_THREADS, SECONDS = 16, float(sys.argv[1])
cpu = CPU()
shared = [DeviceQueue(cpu) for _ in range(4)] + [cpu.default_queue]
lock = threading.Lock()
counts = {"expected": 0, "ran": 0, "iterations": 0}
errors = []

def bump():
    with lock:
        counts["ran"] += 1

def expect(n):
    with lock:
        counts["expected"] += n

def worker(seed):
    rnd = random.Random(seed)
    deadline = time.monotonic() + SECONDS
    try:
        while time.monotonic() < deadline:
            q = DeviceQueue(cpu)
            f = CompletionFlag(cpu)
            ev = DeviceEvent(cpu, enable_timing=rnd.random() < 0.5)
            # Gate q; another queue's host function opens the gate.
            q.wait_for_host_value(f, 1)
            expect(2)
            getattr(q, ENQ)(bump)
            getattr(rnd.choice(shared), ENQ)(lambda f=f: (f.signal(1), bump()))
            q.record_event(ev)
            q2 = DeviceQueue(cpu)
            q2.wait_for(ev)
            q2.wait_for(rnd.choice(shared))
            g = CompletionFlag(cpu)
            expect(2)
            getattr(q2, ENQ_ASYNC)(bump, g, 7, cpu)
            q2.wait_for_host_value(g, 7)
            getattr(q2, ENQ)(bump)
            if rnd.random() < 0.1:
                q2.synchronize(timeout=20)
            if rnd.random() < 0.05:
                ev.synchronize(timeout=20)
            del q, q2, f, g, ev
            with lock:
                counts["iterations"] += 1
    except BaseException as e:
        errors.append(repr(e))

threads = [threading.Thread(target=worker, args=(i,)) for i in range(N_THREADS)]
for t in threads:
    t.start()
for t in threads:
    t.join(SECONDS + 60)
    assert not t.is_alive(), "worker thread stuck"
cpu.synchronize(timeout=30)
print("ERRORS", errors, flush=True)
print("COUNTS", counts["iterations"], counts["expected"], counts["ran"], flush=True)
"""


@pytest.mark.timeout(150)
def test_many_threads_create_destroy_and_enqueue(run_py):
    r = run_py(THREADS_CHILD.replace("sys.argv[1]", "3.0"), timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    assert "ERRORS []" in r.stdout, r.stdout[-3000:]
    line = next(x for x in r.stdout.splitlines() if x.startswith("COUNTS"))
    iterations, expected, ran = map(int, line.split()[1:])
    assert iterations >= 16, line
    assert ran == expected, f"{expected - ran} host functions did not run"
    _assert_quiet(r.stderr)


# --------------------------------------------------------------------------
# Ctrl-C in every kind of wait


CTRL_C_CHILD = r"""
import os, signal, sys, threading, time
from max.driver import CPU, CompletionFlag, DeviceEvent, DeviceQueue
kind, tmo = sys.argv[1], sys.argv[2]
cpu = CPU()
q = cpu.default_queue if kind == "default_queue" else DeviceQueue(cpu)
f = CompletionFlag(cpu)
q.wait_for_host_value(f, 1)
ran = threading.Event()
getattr(q, "__unsafe_enqueue_py_host_func")(ran.set)
if kind in ("queue", "default_queue"):
    wait = q.synchronize
elif kind == "event":
    wait = q.record_event().synchronize
elif kind == "explicit_event":
    ev = DeviceEvent(cpu, enable_timing=True)
    q.record_event(ev)
    wait = ev.synchronize
else:
    wait = cpu.synchronize

entered = threading.Event()
sent = []
def interrupter():
    entered.wait()
    time.sleep(0.3)  # shows the wait has NOT returned by itself
    sent.append(time.monotonic())
    os.kill(os.getpid(), signal.SIGINT)
threading.Thread(target=interrupter, daemon=True).start()
entered.set()
try:
    if tmo == "none":
        wait()
    else:
        wait(timeout=float(tmo))
    print("NOT-INTERRUPTED", flush=True)
except KeyboardInterrupt:
    print("INTERRUPTED %.3f" % (time.monotonic() - sent[0]), flush=True)
print("RAN-EARLY" if ran.is_set() else "NOT-RUN-YET", flush=True)
f.signal(1)
q.synchronize(timeout=20)
print("RAN" if ran.wait(20) else "LOST", flush=True)
"""


@pytest.mark.parametrize("timeout", ["none", "60"])
@pytest.mark.parametrize(
    "kind", ["queue", "default_queue", "event", "explicit_event", "device"]
)
def test_ctrl_c_in_every_wait(popen_py, kind, timeout):
    proc = popen_py(CTRL_C_CHILD, kind, timeout)
    out, err = _finish(proc, 60)
    assert proc.returncode == 0, out + err
    assert "NOT-INTERRUPTED" not in out, out + err
    assert "INTERRUPTED" in out, out + err
    latency = float(out.split("INTERRUPTED", 1)[1].split()[0])
    assert latency < 1.0, f"KeyboardInterrupt arrived {latency:.3f} s after SIGINT"
    assert "NOT-RUN-YET" in out, out  # the gate held during the wait
    assert "RAN" in out.split("NOT-RUN-YET", 1)[1], out + err
    _assert_quiet(err)


# --------------------------------------------------------------------------
# A signal-free sanity check that every kind of wait above really blocks
# (otherwise the Ctrl-C test could pass without ever waiting).


@pytest.mark.parametrize(
    "kind", ["queue", "default_queue", "event", "explicit_event", "device"]
)
def test_every_wait_kind_blocks_while_gated(kind):
    cpu = CPU()
    q = cpu.default_queue if kind == "default_queue" else DeviceQueue(cpu)
    f = CompletionFlag(cpu)
    q.wait_for_host_value(f, 1)
    try:
        if kind in ("queue", "default_queue"):
            wait = q.synchronize
        elif kind == "event":
            wait = q.record_event().synchronize
        elif kind == "explicit_event":
            ev = DeviceEvent(cpu)
            q.record_event(ev)
            wait = ev.synchronize
        else:
            wait = cpu.synchronize
        with pytest.raises(TimeoutError):
            wait(timeout=NOT_YET)
    finally:
        f.signal(1)
    q.synchronize(timeout=WAIT)


def test_threads_waiting_while_objects_are_dropped(cpu):
    """Waiters in several threads on an event and a queue; the main thread
    drops its own references to them while they wait."""
    q = DeviceQueue(cpu)
    f = CompletionFlag(cpu)
    q.wait_for_host_value(f, 1)
    ev = q.record_event()
    results = []
    lock = threading.Lock()

    def waiter(wait):
        try:
            wait(timeout=WAIT)
            r = "ok"
        except BaseException as e:  # reported below
            r = repr(e)
        with lock:
            results.append(r)

    threads = [
        threading.Thread(target=waiter, args=(w,))
        for w in (q.synchronize, ev.synchronize, cpu.synchronize) * 3
    ]
    for t in threads:
        t.start()
    del q, ev
    gc.collect()
    time.sleep(NOT_YET)
    assert results == []
    f.signal(1)
    for t in threads:
        t.join(WAIT)
    assert results == ["ok"] * len(threads)
