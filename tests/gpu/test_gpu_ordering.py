"""Ordering with real device work on a CUDA GPU.

Each test launches the spin kernel of ``spin_kernels.cu`` on the streams of
max.driver queues and reads what the kernels wrote into mapped pinned
memory, so what is checked is the order in which the GPU really ran the
work, not what the API reports.
"""

from __future__ import annotations

import threading
import time

import pytest
from gpu_kernels import MS, cuda_skip_reason

from max import driver

_REASON = cuda_skip_reason()
if _REASON:
    pytest.skip(_REASON, allow_module_level=True)

WAIT = 20.0


def _enqueue(queue, fn):
    getattr(queue, "__unsafe_enqueue_py_host_func")(fn)


# ---- (a) one queue: a host function runs after the kernel before it --------


def test_host_function_observes_kernel_write(kernels, acc, buf):
    q = driver.DeviceQueue(acc)
    seen = []
    kernels.spin_write(q, 50 * MS, out=buf.dev(1), value=42, stop=buf)
    ev = q.record_event()
    _enqueue(q, lambda: seen.append(buf[1]))
    # The kernel spins for 50 ms: nothing has been written yet.
    assert buf[1] == 0
    assert not ev.is_ready()
    q.synchronize(timeout=WAIT)
    assert seen == [42], "the host function ran before the kernel's write"
    assert ev.is_ready()


def test_kernels_and_host_functions_alternate_in_order(kernels, acc, buf):
    q = driver.DeviceQueue(acc)
    seen = []
    for value in (1, 2, 3):
        kernels.spin_write(q, 10 * MS, out=buf.dev(1), value=value, stop=buf)
        _enqueue(q, lambda: seen.append(buf[1]))
    q.synchronize(timeout=WAIT)
    assert seen == [1, 2, 3]


def test_event_synchronize_waits_for_the_kernel(kernels, acc, buf):
    q = driver.DeviceQueue(acc)
    kernels.spin_write(q, 50 * MS, out=buf.dev(1), value=5, stop=buf)
    ev = q.record_event()
    ev.synchronize(timeout=WAIT)
    assert buf[1] == 5
    assert ev.is_ready()


# ---- (b) a host-value gate holds device work back ---------------------------


def test_host_value_gate_holds_a_kernel(kernels, acc, buf):
    q = driver.DeviceQueue(acc)
    flag = driver.CompletionFlag(acc)
    q.wait_for_host_value(flag, 1)
    kernels.spin_write(q, 0, out=buf.dev(1), value=7)
    ev = q.record_event()
    try:
        time.sleep(0.1)
        assert buf[1] == 0, "the kernel ran although its queue was gated"
        assert not ev.is_ready()
        with pytest.raises(TimeoutError):
            q.synchronize(timeout=0)
        # The gate waits for equality: another value does not release it.
        flag.signal(2)
        time.sleep(0.05)
        assert buf[1] == 0, "the gate opened on a value it was not waiting for"
        # Release from another thread while this one blocks in synchronize.
        timer = threading.Timer(0.05, flag.signal, args=(1,))
        timer.start()
        start = time.monotonic()
        q.synchronize(timeout=WAIT)
        timer.join()
        assert time.monotonic() - start >= 0.03
        assert buf[1] == 7
        assert ev.is_ready()
    finally:
        flag.signal(1)


def test_gate_on_one_queue_does_not_hold_another(kernels, acc, buf):
    gated, free = driver.DeviceQueue(acc), driver.DeviceQueue(acc)
    flag = driver.CompletionFlag(acc)
    gated.wait_for_host_value(flag, 1)
    kernels.spin_write(gated, 0, out=buf.dev(1), value=1)
    try:
        kernels.spin_write(free, 0, out=buf.dev(2), value=2)
        free.synchronize(timeout=WAIT)
        assert buf[2] == 2
        assert buf[1] == 0
    finally:
        flag.signal(1)
    gated.synchronize(timeout=WAIT)
    assert buf[1] == 1


# ---- (c) cross-queue waits ----------------------------------------------------


@pytest.mark.parametrize("how", ["queue", "event", "device"])
def test_cross_queue_wait_orders_kernels(kernels, acc, buf, how):
    # A spins for 300 ms, then writes 1 into slot 1.  B waits for A, then its
    # kernel copies slot 1 into slot 2 and writes 2 into slot 3.  A control
    # queue C, which does not wait, copies slot 1 into slot 4 at once: it
    # shows that A was still running when B was held back.
    a = acc.default_queue if how == "device" else driver.DeviceQueue(acc)
    b, c = driver.DeviceQueue(acc), driver.DeviceQueue(acc)
    kernels.spin_write(a, 300 * MS, out=buf.dev(1), value=1, stop=buf)
    if how == "queue":
        b.wait_for(a)
    elif how == "event":
        b.wait_for(a.record_event())
    else:
        b.wait_for(acc)  # waits for acc.default_queue, which is `a`
    kernels.spin_write(b, 0, watch=buf.dev(1), seen=buf.dev(2), out=buf.dev(3), value=2)
    kernels.spin_write(c, 0, watch=buf.dev(1), seen=buf.dev(4), out=buf.dev(5), value=3)
    c.synchronize(timeout=WAIT)
    b_done, a_done = buf[3], buf[1]  # read B first: then A's 0 covers B's read
    assert buf[5] == 3 and buf[4] == 0, (
        "the control kernel did not run while A spun: the GPU did not run "
        f"two queues concurrently (slots {list(buf.slots)})"
    )
    assert a_done == 0, "A finished before the control queue: the test lost its race"
    assert b_done == 0, f"B's kernel ran while A was still running (wait_for {how})"
    b.synchronize(timeout=WAIT)
    assert buf[1] == 1
    assert buf[2] == 1, "B's kernel did not see A's write"
    assert buf[3] == 2


def test_wait_for_event_waits_for_the_recorded_point(kernels, acc, buf):
    # B waits for ev as recorded behind A's long kernel; re-recording ev on an
    # idle queue afterwards must not release B early.
    a, b, idle = (driver.DeviceQueue(acc) for _ in range(3))
    kernels.spin_write(a, 200 * MS, out=buf.dev(1), value=1, stop=buf)
    ev = a.record_event()
    b.wait_for(ev)
    idle.record_event(ev)
    kernels.spin_write(b, 0, watch=buf.dev(1), seen=buf.dev(2), out=buf.dev(3), value=2)
    b.synchronize(timeout=WAIT)
    assert buf[2] == 1, "B ran before the point it waited for"


# ---- (e) two queues run concurrently ------------------------------------------


def _wall(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def test_two_queues_overlap(kernels, acc, buf):
    q1, q2 = driver.DeviceQueue(acc), driver.DeviceQueue(acc)

    def parallel():
        kernels.spin_write(q1, 50 * MS, out=buf.dev(1), value=1, stop=buf)
        kernels.spin_write(q2, 50 * MS, out=buf.dev(2), value=1, stop=buf)
        q1.synchronize(timeout=WAIT)
        q2.synchronize(timeout=WAIT)

    def serial():
        kernels.spin_write(q1, 50 * MS, out=buf.dev(3), value=1, stop=buf)
        kernels.spin_write(q1, 50 * MS, out=buf.dev(4), value=1, stop=buf)
        q1.synchronize(timeout=WAIT)

    # Best of three each: a busy host can only make a run slower.
    overlapped = min(_wall(parallel) for _ in range(3))
    one_queue = min(_wall(serial) for _ in range(3))
    assert all(buf[i] == 1 for i in (1, 2, 3, 4))
    assert one_queue >= 0.095, f"two 50 ms kernels took {one_queue * 1e3:.1f} ms"
    assert overlapped < 0.090, (
        f"two 50 ms kernels on two queues took {overlapped * 1e3:.1f} ms "
        f"(one queue: {one_queue * 1e3:.1f} ms): the queues did not overlap"
    )
