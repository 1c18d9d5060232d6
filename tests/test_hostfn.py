"""Python host functions (SPEC §7, §10) on the CPU backend."""

from __future__ import annotations

import ctypes
import gc
import sys
import threading
import time
import weakref

import pytest

from max import driver
from max.driver import CPU, CompletionFlag, DeviceEvent, DeviceQueue

WAIT = 20.0
NOT_YET = 0.1

ENQ = "__unsafe_enqueue_py_host_func"
ENQ_ASYNC = "__unsafe_enqueue_async_py_host_func"


def _pack():
    return getattr(driver, "__unsafe_pack_py_host_func")


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


# --------------------------------------------------------------------------
# Names


def test_literal_names_registered(cpu, queue):
    for obj in (cpu, queue, CPU()):
        assert callable(getattr(obj, ENQ))
        assert callable(getattr(obj, ENQ_ASYNC))
    assert callable(_pack())
    assert "__unsafe_pack_py_host_func" not in driver.__all__


# --------------------------------------------------------------------------
# Synchronous host functions


@pytest.mark.parametrize("target", ["queue", "device"])
def test_runs_on_another_thread(cpu, queue, target):
    obj = queue if target == "queue" else cpu
    q = queue if target == "queue" else cpu.default_queue
    idents = []
    getattr(obj, ENQ)(lambda: idents.append(threading.get_ident()))
    q.synchronize(timeout=WAIT)
    assert len(idents) == 1
    assert idents[0] != threading.get_ident()


def test_returns_none(queue):
    assert getattr(queue, ENQ)(lambda: None) is None
    assert getattr(queue.device, ENQ)(lambda: None) is None
    queue.synchronize(timeout=WAIT)


def test_device_variant_uses_default_queue(cpu, rec, gate):
    other = DeviceQueue(cpu)
    f = gate(cpu.default_queue)
    gate(other)  # the device variant must not use this queue
    getattr(cpu, ENQ)(rec.fn("dev"))
    time.sleep(NOT_YET)
    assert not rec.has("dev")
    f.signal(1)
    cpu.default_queue.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["dev"]


def test_later_work_waits_for_host_function(queue, rec):
    release = threading.Event()

    def slow():
        release.wait(WAIT)
        rec.add("slow")

    getattr(queue, ENQ)(slow)
    getattr(queue, ENQ)(rec.fn("next"))
    ev = queue.record_event()
    time.sleep(NOT_YET)
    assert rec.snapshot() == []
    assert not ev.is_ready()
    release.set()
    queue.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["slow", "next"]
    assert ev.is_ready()


def test_host_function_holds_the_gil_and_can_use_python(queue):
    out = {}

    def fn():
        out["sum"] = sum(range(1000))
        out["ok"] = isinstance(threading.current_thread(), threading.Thread)

    getattr(queue, ENQ)(fn)
    queue.synchronize(timeout=WAIT)
    assert out == {"sum": 499500, "ok": True}


def test_host_function_may_enqueue_more_work(queue, rec):
    def outer():
        rec.add("outer")
        getattr(queue, ENQ)(rec.fn("inner"))

    getattr(queue, ENQ)(outer)
    assert rec.wait("inner", WAIT)
    queue.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["outer", "inner"]


def test_host_function_may_record_and_wait_on_other_queue(cpu, rec):
    qa, qb = DeviceQueue(cpu), DeviceQueue(cpu)
    getattr(qb, ENQ)(rec.fn("b"))

    def on_a():
        ev = qb.record_event()
        ev.synchronize(timeout=WAIT)  # qb's work is independent of qa
        rec.add("a")

    getattr(qa, ENQ)(on_a)
    qa.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["b", "a"]


@pytest.mark.parametrize("bad", [None, 1, "fn", object(), [lambda: None]])
def test_non_callable_type_error(cpu, queue, bad, rec):
    with pytest.raises(TypeError):
        getattr(queue, ENQ)(bad)
    with pytest.raises(TypeError):
        getattr(cpu, ENQ)(bad)
    # Nothing was enqueued: the queue is idle.
    assert queue.record_event().is_ready()


def test_arity(queue):
    with pytest.raises(TypeError):
        getattr(queue, ENQ)()
    with pytest.raises(TypeError):
        getattr(queue, ENQ)(lambda: None, lambda: None)


def test_exception_goes_to_unraisablehook(queue, unraisable, rec):
    def boom():
        raise RuntimeError("boom")

    getattr(queue, ENQ)(boom)
    getattr(queue, ENQ)(rec.fn("after"))
    assert queue.synchronize(timeout=WAIT) is None  # does not raise
    assert unraisable.wait(1)
    assert rec.snapshot() == ["after"]
    assert (RuntimeError, "boom") in unraisable.records


def test_exception_in_device_variant(cpu, unraisable, rec):
    def boom():
        raise ValueError("bad value in host fn")

    getattr(cpu, ENQ)(boom)
    getattr(cpu, ENQ)(rec.fn("after"))
    cpu.synchronize(timeout=WAIT)
    assert unraisable.wait(1)
    assert (ValueError, "bad value in host fn") in unraisable.records
    assert rec.snapshot() == ["after"]


def test_many_exceptions_queue_carries_on(queue, unraisable, rec):
    def boom():
        raise KeyError("k")

    for i in range(20):
        getattr(queue, ENQ)(boom)
        getattr(queue, ENQ)(rec.fn(i))
    queue.synchronize(timeout=WAIT)
    assert unraisable.wait(20)
    assert rec.snapshot() == list(range(20))


def test_exception_printed_on_stderr(run_py):
    code = r"""
from max.driver import CPU, DeviceQueue
q = DeviceQueue(CPU())
def boom():
    raise RuntimeError("boom")
getattr(q, "__unsafe_enqueue_py_host_func")(boom)
done = []
getattr(q, "__unsafe_enqueue_py_host_func")(lambda: done.append(1))
q.synchronize(timeout=20)
getattr(CPU(), "__unsafe_enqueue_py_host_func")(boom)
CPU().synchronize(timeout=20)
print("DONE", done)
"""
    r = run_py(code, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "DONE [1]" in r.stdout
    assert r.stderr.count("RuntimeError: boom") == 2, r.stderr


def test_host_function_released_after_run(queue):
    fn = Callable()
    released = threading.Event()
    weakref.finalize(fn, released.set)
    getattr(queue, ENQ)(fn)
    del fn
    queue.synchronize(timeout=WAIT)
    assert released.wait(WAIT), "host function reference was not dropped"


def test_raising_host_function_released_after_run(queue, unraisable):
    def boom():
        raise RuntimeError("x")

    fn = Callable(boom)
    released = threading.Event()
    weakref.finalize(fn, released.set)
    getattr(queue, ENQ)(fn)
    del fn
    queue.synchronize(timeout=WAIT)
    assert released.wait(WAIT)
    assert unraisable.wait(1)


# --------------------------------------------------------------------------
# Asynchronous host functions


@pytest.mark.parametrize("target", ["queue", "device"])
def test_async_host_function(cpu, queue, target):
    obj = queue if target == "queue" else cpu
    q = queue if target == "queue" else cpu.default_queue
    flag = CompletionFlag(cpu)
    flag.signal(99)  # the kickoff resets it to 0
    started, release = threading.Event(), threading.Event()
    info = {}

    def fn():
        info["thread"] = threading.get_ident()
        info["flag_during_fn"] = flag.load()
        started.set()
        release.wait(WAIT)

    try:
        assert getattr(obj, ENQ_ASYNC)(fn, flag, 5, cpu) is None
        # The queue goes on at once, although fn is still running.
        assert started.wait(WAIT)
        q.synchronize(timeout=WAIT)
        assert flag.load() == 0
        assert info["flag_during_fn"] == 0
        assert info["thread"] != threading.get_ident()
        # Work gated on the flag waits for fn.
        after = []
        q.wait_for_host_value(flag, 5)
        getattr(q, ENQ)(lambda: after.append(1))
        time.sleep(NOT_YET)
        assert after == []
        assert flag.load() == 0
    finally:
        release.set()
    q.synchronize(timeout=WAIT)
    assert after == [1]
    assert flag.load() == 5


def test_async_host_function_is_not_on_the_queue_thread(cpu, queue):
    flag = CompletionFlag(cpu)
    idents = {}
    getattr(queue, ENQ)(lambda: idents.__setitem__("queue", threading.get_ident()))
    getattr(queue, ENQ_ASYNC)(
        lambda: idents.__setitem__("async", threading.get_ident()), flag, 1, cpu
    )
    queue.wait_for_host_value(flag, 1)
    queue.synchronize(timeout=WAIT)
    assert set(idents) == {"queue", "async"}
    assert idents["async"] != threading.get_ident()


def test_async_host_function_signals_after_exception(cpu, queue, unraisable):
    flag = CompletionFlag(cpu)

    def boom():
        raise RuntimeError("async boom")

    getattr(queue, ENQ_ASYNC)(boom, flag, 7, cpu)
    queue.wait_for_host_value(flag, 7)
    done = []
    getattr(queue, ENQ)(lambda: done.append(1))
    queue.synchronize(timeout=WAIT)
    assert done == [1]
    assert flag.load() == 7
    assert unraisable.wait(1)
    assert (RuntimeError, "async boom") in unraisable.records


def test_async_host_function_ordering_after_earlier_work(cpu, queue, gate, rec):
    flag = CompletionFlag(cpu)
    flag.signal(42)
    g = gate(queue)
    getattr(queue, ENQ_ASYNC)(rec.fn("async"), flag, 1, cpu)
    time.sleep(NOT_YET)
    # The kickoff has not run: the flag was not reset, fn did not run.
    assert flag.load() == 42
    assert not rec.has("async")
    g.signal(1)
    queue.wait_for_host_value(flag, 1)
    queue.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["async"]
    assert flag.load() == 1


def test_async_host_function_max_value(cpu, queue):
    flag = CompletionFlag(cpu)
    getattr(queue, ENQ_ASYNC)(lambda: None, flag, 2**64 - 1, cpu)
    queue.wait_for_host_value(flag, 2**64 - 1)
    queue.synchronize(timeout=WAIT)
    assert flag.load() == 2**64 - 1


def test_async_host_function_released_after_run(cpu, queue):
    flag = CompletionFlag(cpu)
    fn = Callable()
    released = threading.Event()
    weakref.finalize(fn, released.set)
    getattr(queue, ENQ_ASYNC)(fn, flag, 1, cpu)
    del fn
    queue.wait_for_host_value(flag, 1)
    queue.synchronize(timeout=WAIT)
    assert released.wait(WAIT)


def _bad_async_args(cpu, queue):
    flag = CompletionFlag(cpu)
    ok = lambda: None  # noqa: E731
    return [
        ("fn", (None, flag, 1, cpu)),
        ("fn", (1, flag, 1, cpu)),
        ("flag", (ok, None, 1, cpu)),
        ("flag", (ok, 1, 1, cpu)),
        ("flag", (ok, DeviceEvent(cpu), 1, cpu)),
        ("value", (ok, flag, -1, cpu)),
        ("value", (ok, flag, 2**64, cpu)),
        ("value", (ok, flag, 1.5, cpu)),
        ("value", (ok, flag, "1", cpu)),
        ("cpu", (ok, flag, 1, None)),
        ("cpu", (ok, flag, 1, 1)),
        ("cpu", (ok, flag, 1, queue)),
        ("cpu", (ok, flag, 1, "cpu")),
    ], flag


@pytest.mark.parametrize("target", ["queue", "device"])
def test_async_type_errors_change_nothing(cpu, queue, target, unraisable):
    obj = queue if target == "queue" else cpu
    cases, flag = _bad_async_args(cpu, queue)
    flag.signal(9)
    for what, args in cases:
        with pytest.raises(TypeError, match=None) as exc:
            getattr(obj, ENQ_ASYNC)(*args)
        assert exc.type is TypeError, what
    # Nothing was enqueued and the flag was not touched.
    (queue if target == "queue" else cpu.default_queue).synchronize(timeout=WAIT)
    assert flag.load() == 9


def test_async_arity(cpu, queue):
    flag = CompletionFlag(cpu)
    with pytest.raises(TypeError):
        getattr(queue, ENQ_ASYNC)(lambda: None, flag, 1)
    with pytest.raises(TypeError):
        getattr(queue, ENQ_ASYNC)(lambda: None, flag, 1, cpu, 5)
    with pytest.raises(TypeError):
        getattr(queue, ENQ_ASYNC)()


# --------------------------------------------------------------------------
# __unsafe_pack_py_host_func


def _call_trampoline(ptr, data):
    ctypes.CFUNCTYPE(None, ctypes.c_void_p)(ptr)(data)


def test_pack_runs_fn_and_releases_it():
    fn = Callable()
    before = sys.getrefcount(fn)
    packed = _pack()(fn)
    assert isinstance(packed, tuple) and len(packed) == 2
    ptr, data = packed
    assert type(ptr) is int and type(data) is int
    assert ptr != 0 and data != 0
    assert sys.getrefcount(fn) == before + 1  # the pair keeps fn alive
    _call_trampoline(ptr, data)
    assert fn.calls == 1
    assert fn.thread == threading.get_ident()
    assert sys.getrefcount(fn) == before  # released after the call


def test_pack_keeps_fn_alive_until_called():
    fn = Callable()
    released = threading.Event()
    weakref.finalize(fn, released.set)
    ptr, data = _pack()(fn)
    calls = []
    fn.action = lambda: calls.append(1)
    del fn
    gc.collect()
    assert not released.is_set()
    _call_trampoline(ptr, data)
    assert calls == [1]
    assert released.is_set()


def test_pack_called_from_another_thread():
    fn = Callable()
    ptr, data = _pack()(fn)
    t = threading.Thread(target=_call_trampoline, args=(ptr, data))
    t.start()
    t.join(WAIT)
    assert fn.calls == 1
    assert fn.thread == t.ident


def test_pack_exception_goes_to_unraisablehook(unraisable):
    def boom():
        raise RuntimeError("packed boom")

    ptr, data = _pack()(boom)
    _call_trampoline(ptr, data)  # must not raise here
    assert unraisable.wait(1)
    assert (RuntimeError, "packed boom") in unraisable.records


@pytest.mark.parametrize("bad", [None, 1, "fn", object()])
def test_pack_non_callable(bad):
    with pytest.raises(TypeError):
        _pack()(bad)


def test_pack_arity():
    with pytest.raises(TypeError):
        _pack()()
    with pytest.raises(TypeError):
        _pack()(lambda: None, lambda: None)
