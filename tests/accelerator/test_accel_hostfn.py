"""Python host functions on accelerator queues (SPEC §7, §10)."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import pytest
from accel_support import ENQ, ENQ_ASYNC, NOT_YET, WAIT

from max.driver import CPU, CompletionFlag, DeviceQueue


class Callable:
    """A callable that can be weak-referenced (to observe its release)."""

    def __init__(self, action=None):
        self.action = action
        self.calls = 0
        self.thread = None

    def __call__(self):
        self.calls += 1
        self.thread = threading.get_ident()
        if self.action is not None:
            self.action()


def test_literal_names_registered(acc, aq):
    for obj in (acc, aq, acc.default_queue):
        assert callable(getattr(obj, ENQ))
        assert callable(getattr(obj, ENQ_ASYNC))


@pytest.mark.parametrize("target", ["queue", "device"])
def test_runs_on_another_thread_returns_none(acc, aq, target):
    obj = aq if target == "queue" else acc
    q = aq if target == "queue" else acc.default_queue
    idents = []
    assert getattr(obj, ENQ)(lambda: idents.append(threading.get_ident())) is None
    q.synchronize(timeout=WAIT)
    assert len(idents) == 1
    assert idents[0] != threading.get_ident()


def test_device_variant_uses_default_queue(acc, rec, gate):
    other = DeviceQueue(acc)
    f = gate(acc.default_queue)
    gate(other)  # the device variant must not use this queue
    getattr(acc, ENQ)(rec.fn("dev"))
    time.sleep(NOT_YET)
    assert not rec.has("dev")
    f.signal(1)
    acc.default_queue.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["dev"]


def test_device_variant_on_second_device(acc1, rec):
    getattr(acc1, ENQ)(rec.fn("dev1"))
    acc1.default_queue.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["dev1"]


def test_later_work_waits_for_host_function(aq, rec):
    release = threading.Event()

    def slow():
        release.wait(WAIT)
        rec.add("slow")

    getattr(aq, ENQ)(slow)
    getattr(aq, ENQ)(rec.fn("next"))
    ev = aq.record_event()
    try:
        time.sleep(NOT_YET)
        assert rec.snapshot() == []
        assert not ev.is_ready()
    finally:
        release.set()
    aq.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["slow", "next"]
    assert ev.is_ready()


def test_host_function_uses_python(aq):
    out = {}

    def fn():
        out["value"] = sum(i * i for i in range(1000))
        out["text"] = "-".join(str(i) for i in range(3))

    getattr(aq, ENQ)(fn)
    aq.synchronize(timeout=WAIT)
    assert out == {"value": 332833500, "text": "0-1-2"}


def test_host_function_may_enqueue_more_work(aq, rec):
    def first():
        rec.add("first")
        getattr(aq, ENQ)(rec.fn("second"))

    getattr(aq, ENQ)(first)
    assert rec.wait("second")
    aq.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["first", "second"]


def test_host_function_records_event_and_signals_flag(acc, acc1, rec):
    q0, q1 = DeviceQueue(acc), DeviceQueue(acc1)
    f = CompletionFlag(acc1)
    q1.wait_for_host_value(f, 1)
    getattr(q1, ENQ)(rec.fn("q1"))
    box = []

    def fn():
        box.append(q0.record_event())
        f.signal(1)

    getattr(q0, ENQ)(fn)
    try:
        q1.synchronize(timeout=WAIT)
    finally:
        f.signal(1)
    assert rec.snapshot() == ["q1"]
    box[0].synchronize(timeout=WAIT)


@pytest.mark.parametrize("bad", [None, 1, "fn", object()])
def test_non_callable_type_error(acc, aq, bad, rec):
    for obj in (acc, aq):
        with pytest.raises(TypeError):
            getattr(obj, ENQ)(bad)
    getattr(aq, ENQ)(rec.fn("ok"))
    aq.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["ok"]


def test_exception_goes_to_unraisablehook(aq, unraisable, rec):
    def boom():
        raise RuntimeError("boom")

    getattr(aq, ENQ)(boom)
    getattr(aq, ENQ)(rec.fn("after"))
    assert aq.synchronize(timeout=WAIT) is None  # does not raise
    assert unraisable.wait(1)
    assert (RuntimeError, "boom") in unraisable.records
    assert rec.snapshot() == ["after"]


def test_exception_in_device_variant(acc, unraisable, rec):
    def boom():
        raise ValueError("dev-boom")

    getattr(acc, ENQ)(boom)
    getattr(acc, ENQ)(rec.fn("after"))
    acc.synchronize(timeout=WAIT)
    assert unraisable.wait(1)
    assert (ValueError, "dev-boom") in unraisable.records
    assert rec.snapshot() == ["after"]


def test_exception_printed_on_stderr(run_acc_py):
    code = r"""
from max.driver import Accelerator, DeviceQueue
q = DeviceQueue(Accelerator())
def boom():
    raise RuntimeError("boom")
getattr(q, "__unsafe_enqueue_py_host_func")(boom)
q.synchronize(timeout=20)
print("DONE")
"""
    r = run_acc_py(code)
    assert r.returncode == 0, r.stderr
    assert "DONE" in r.stdout
    assert "RuntimeError: boom" in r.stderr


def test_host_function_released_after_run(aq):
    fn = Callable()
    ref = weakref.ref(fn)
    getattr(aq, ENQ)(fn)
    del fn
    aq.synchronize(timeout=WAIT)
    gc.collect()
    assert ref() is None


def test_many_host_functions_in_order(aq, rec):
    for i in range(1000):
        getattr(aq, ENQ)(rec.fn(i))
    aq.synchronize(timeout=WAIT)
    assert rec.snapshot() == list(range(1000))


# --------------------------------------------------------------------------
# Async host functions


@pytest.mark.parametrize("target", ["queue", "device"])
def test_async_host_function(acc, aq, rec, target):
    obj = aq if target == "queue" else acc
    q = aq if target == "queue" else acc.default_queue
    f = CompletionFlag(acc)
    f.signal(5)  # the kickoff resets it to 0 first
    caller = threading.get_ident()
    fn = Callable(lambda: rec.add("fn"))
    assert getattr(obj, ENQ_ASYNC)(fn, f, 3, CPU()) is None
    q.wait_for_host_value(f, 3)
    getattr(q, ENQ)(rec.fn("after"))
    q.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["fn", "after"]
    assert fn.calls == 1
    assert fn.thread != caller
    assert f.load() == 3


def test_async_lets_queue_go_on(acc, aq, rec):
    """The queue goes on at once: later work that does not wait for the flag
    runs while fn is still running."""
    f = CompletionFlag(acc)
    release = threading.Event()
    getattr(aq, ENQ_ASYNC)(lambda: (release.wait(WAIT), rec.add("fn")), f, 1, CPU())
    getattr(aq, ENQ)(rec.fn("next"))
    try:
        assert rec.wait("next")
        assert not rec.has("fn")
    finally:
        release.set()
    aq.wait_for_host_value(f, 1)
    aq.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["next", "fn"]


def test_async_signals_after_exception(acc, aq, unraisable):
    f = CompletionFlag(acc)

    def boom():
        raise RuntimeError("async-boom")

    getattr(aq, ENQ_ASYNC)(boom, f, 9, CPU())
    aq.wait_for_host_value(f, 9)
    aq.synchronize(timeout=WAIT)
    assert f.load() == 9
    assert unraisable.wait(1)
    assert (RuntimeError, "async-boom") in unraisable.records


def test_async_ordering_after_earlier_work(acc, aq, gate, rec):
    g = gate(aq)
    f = CompletionFlag(acc)
    getattr(aq, ENQ_ASYNC)(rec.fn("fn"), f, 1, CPU())
    time.sleep(NOT_YET)
    assert not rec.has("fn")  # the kickoff is behind the gate
    g.signal(1)
    aq.wait_for_host_value(f, 1)
    aq.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["fn"]


def test_async_across_devices(acc, acc1, rec):
    """Kickoff on device 0; device 1 waits for the flag of its own device
    signalled by a host function chained on device 0."""
    q0, q1 = DeviceQueue(acc), DeviceQueue(acc1)
    f0, f1 = CompletionFlag(acc), CompletionFlag(acc1)
    getattr(q0, ENQ_ASYNC)(rec.fn("fn"), f0, 1, CPU())
    q0.wait_for_host_value(f0, 1)
    getattr(q0, ENQ)(lambda: f1.signal(2))
    q1.wait_for_host_value(f1, 2)
    getattr(q1, ENQ)(rec.fn("q1"))
    try:
        q1.synchronize(timeout=WAIT)
    finally:
        f1.signal(2)
    assert rec.snapshot() == ["fn", "q1"]


def test_async_max_value(acc, aq):
    f = CompletionFlag(acc)
    getattr(aq, ENQ_ASYNC)(lambda: None, f, 2**64 - 1, CPU())
    aq.wait_for_host_value(f, 2**64 - 1)
    aq.synchronize(timeout=WAIT)
    assert f.load() == 2**64 - 1


def test_async_released_after_run(acc, aq):
    fn = Callable()
    ref = weakref.ref(fn)
    f = CompletionFlag(acc)
    getattr(aq, ENQ_ASYNC)(fn, f, 1, CPU())
    del fn
    aq.wait_for_host_value(f, 1)
    aq.synchronize(timeout=WAIT)
    CPU().synchronize(timeout=WAIT)
    deadline = time.monotonic() + WAIT
    while ref() is not None and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.01)
    assert ref() is None


@pytest.mark.parametrize("target", ["queue", "device"])
def test_async_type_errors_change_nothing(acc, aq, target):
    obj = aq if target == "queue" else acc
    f = CompletionFlag(acc)
    f.signal(5)
    cases = [
        (None, f, 1, CPU()),  # fn not callable
        (lambda: None, None, 1, CPU()),  # not a flag
        (lambda: None, object(), 1, CPU()),
        (lambda: None, f, -1, CPU()),  # not u64
        (lambda: None, f, 2**64, CPU()),
        (lambda: None, f, 1.5, CPU()),
        (lambda: None, f, 1, acc),  # cpu is not the CPU device
        (lambda: None, f, 1, None),
    ]
    for args in cases:
        with pytest.raises(TypeError):
            getattr(obj, ENQ_ASYNC)(*args)
    (aq if target == "queue" else acc.default_queue).synchronize(timeout=WAIT)
    assert f.load() == 5  # no kickoff ran


def test_many_async_host_functions(acc, aq):
    flags = [CompletionFlag(acc) for _ in range(50)]
    seen = []
    lock = threading.Lock()
    for i, f in enumerate(flags):

        def fn(i=i):
            with lock:
                seen.append(i)

        getattr(aq, ENQ_ASYNC)(fn, f, i + 1, CPU())
        aq.wait_for_host_value(f, i + 1)
    aq.synchronize(timeout=WAIT)
    assert sorted(seen) == list(range(50))
    assert [f.load() for f in flags] == [i + 1 for i in range(50)]
