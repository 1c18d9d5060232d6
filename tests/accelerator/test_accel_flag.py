"""CompletionFlag on an accelerator (SPEC §6, §10): pinned host memory
mapped into the device's address space."""

from __future__ import annotations

import gc
import re
import threading

import pytest
from accel_support import ENQ, ENQ_ASYNC, NOT_YET, WAIT

from max.driver import CPU, CompletionFlag, DeviceQueue

U64_MAX = 2**64 - 1


def test_initial_value_and_device(acc):
    f = CompletionFlag(acc)
    assert f.load() == 0
    assert type(f.load()) is int
    assert f.device is acc
    assert CompletionFlag(device=acc).load() == 0


def test_flag_on_second_device(acc1):
    f = CompletionFlag(acc1)
    assert f.device is acc1
    assert f.device_ptr != 0


def test_device_ptr(acc):
    flags = [CompletionFlag(acc) for _ in range(16)]
    ptrs = [f.device_ptr for f in flags]
    assert all(type(p) is int and p != 0 for p in ptrs)
    assert len(set(ptrs)) == len(ptrs)  # distinct per flag
    assert [f.device_ptr for f in flags] == ptrs  # stable


def test_unsafe_ptr(acc):
    a, b = CompletionFlag(acc), CompletionFlag(acc)
    for f in (a, b):
        assert type(f._unsafe_ptr) is int
        assert f._unsafe_ptr != 0
        assert f._unsafe_ptr != f.device_ptr
    assert a._unsafe_ptr != b._unsafe_ptr


def test_signal_load_reset(acc):
    f = CompletionFlag(acc)
    assert f.signal(5) is None
    assert f.load() == 5
    f.signal(value=6)
    assert f.load() == 6
    assert f.reset() is None
    assert f.load() == 0
    f.signal(U64_MAX)
    assert f.load() == U64_MAX


def test_flags_are_independent(acc):
    a, b = CompletionFlag(acc), CompletionFlag(acc)
    a.signal(1)
    assert b.load() == 0


@pytest.mark.parametrize("bad", [-1, 2**64, 1.5, "1", None])
def test_signal_bad_value(acc, bad):
    f = CompletionFlag(acc)
    f.signal(3)
    with pytest.raises(TypeError) as exc:
        f.signal(bad)
    assert "value" in str(exc.value)
    assert f.load() == 3


def test_repr(acc):
    f = CompletionFlag(acc)
    f.signal(42)
    r = repr(f)
    hexes = {int(h, 16) for h in re.findall(r"0x([0-9a-fA-F]+)", r)}
    assert f.device_ptr in hexes, r
    assert re.search(r"\b42\b", r), r
    low = r.lower()
    assert "gpu" in low or acc.api in low, r


def test_signal_from_many_threads(acc):
    f = CompletionFlag(acc)
    seen = []

    def worker(v):
        f.signal(v)
        seen.append(f.load())

    ts = [threading.Thread(target=worker, args=(v,)) for v in range(1, 9)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(WAIT)
    assert len(seen) == 8
    assert f.load() in range(1, 9)


def test_signal_from_host_function_releases_gate(acc, rec):
    """A host function on one queue opens another queue's gate."""
    gated, signaller = DeviceQueue(acc), DeviceQueue(acc)
    f = CompletionFlag(acc)
    gated.wait_for_host_value(f, 9)
    getattr(gated, ENQ)(rec.fn("gated"))
    getattr(signaller, ENQ)(lambda: f.signal(9))
    try:
        gated.synchronize(timeout=WAIT)
    finally:
        f.signal(9)
    assert rec.snapshot() == ["gated"]


def test_flag_kept_alive_by_pending_operations(acc, rec):
    """The slot stays valid while enqueued work refers to it, after the last
    Python reference is gone: the async host function signals it and the
    gate reads it."""
    q = DeviceQueue(acc)
    release = threading.Event()
    f = CompletionFlag(acc)
    getattr(q, ENQ_ASYNC)(lambda: release.wait(WAIT), f, 77, CPU())
    q.wait_for_host_value(f, 77)
    getattr(q, ENQ)(rec.fn("after"))
    del f
    gc.collect()
    try:
        assert not rec.wait("after", NOT_YET)
    finally:
        release.set()
    assert rec.wait("after")
    q.synchronize(timeout=WAIT)


def test_many_flags_collected(acc):
    for _ in range(300):
        f = CompletionFlag(acc)
        f.signal(1)
    del f
    gc.collect()
    # Still able to allocate and use flags afterwards.
    g = CompletionFlag(acc)
    g.signal(2)
    assert g.load() == 2


def test_cpu_flag_and_accelerator_flag_differ(acc):
    assert CompletionFlag(CPU()).device is CPU()
    assert CompletionFlag(acc).device is acc
