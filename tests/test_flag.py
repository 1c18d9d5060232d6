"""CompletionFlag (SPEC §6, §10) on the CPU backend."""

from __future__ import annotations

import ctypes
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from max.driver import CPU, CompletionFlag, DeviceQueue

WAIT = 20.0
U64_MAX = 2**64 - 1


def test_initial_value_zero(cpu):
    f = CompletionFlag(cpu)
    assert f.load() == 0
    assert type(f.load()) is int
    assert f.device is cpu


def test_keyword_constructor(cpu):
    f = CompletionFlag(device=cpu)
    assert f.load() == 0


@pytest.mark.parametrize("bad", [None, 0, "cpu", object()])
def test_constructor_type_error(bad):
    with pytest.raises(TypeError):
        CompletionFlag(bad)


def test_constructor_errors(cpu):
    with pytest.raises(TypeError):
        CompletionFlag()
    with pytest.raises(TypeError):
        CompletionFlag(cpu.default_queue)
    with pytest.raises(TypeError):
        CompletionFlag(cpu, cpu)


def test_signal_load_reset(cpu):
    f = CompletionFlag(cpu)
    assert f.signal(5) is None
    assert f.load() == 5
    f.signal(value=6)
    assert f.load() == 6
    assert f.reset() is None
    assert f.load() == 0
    f.signal(U64_MAX)
    assert f.load() == U64_MAX
    f.signal(0)
    assert f.load() == 0


def test_each_flag_has_its_own_slot(cpu):
    a, b = CompletionFlag(cpu), CompletionFlag(cpu)
    a.signal(1)
    assert b.load() == 0


SETTINGS = dict(
    deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@settings(max_examples=200, **SETTINGS)
@given(st.integers(min_value=0, max_value=U64_MAX))
def test_signal_roundtrip_u64(value):
    f = CompletionFlag(CPU())
    f.signal(value)
    assert f.load() == value


@settings(max_examples=100, **SETTINGS)
@given(
    st.one_of(
        st.integers(max_value=-1),
        st.integers(min_value=2**64),
    )
)
def test_signal_out_of_range_type_error(value):
    f = CompletionFlag(CPU())
    f.signal(3)
    with pytest.raises(TypeError) as exc:
        f.signal(value)
    assert "value" in str(exc.value)
    assert f.load() == 3  # a call that raises changes nothing


@pytest.mark.parametrize("bad", [-1, 2**64, 1.5, "1", None, b"1", 1.0, 2j])
def test_signal_bad_value(cpu, bad):
    f = CompletionFlag(cpu)
    f.signal(3)
    with pytest.raises(TypeError) as exc:
        f.signal(bad)
    assert "value" in str(exc.value)
    assert f.load() == 3


def test_signal_index_object(cpu):
    class Idx:
        def __index__(self):
            return 12

    f = CompletionFlag(cpu)
    f.signal(Idx())
    assert f.load() == 12


def test_signal_bad_index_object(cpu):
    class Neg:
        def __index__(self):
            return -5

    class Boom:
        def __index__(self):
            raise ZeroDivisionError("boom")

    f = CompletionFlag(cpu)
    with pytest.raises(TypeError):
        f.signal(Neg())
    with pytest.raises((TypeError, ZeroDivisionError)):
        f.signal(Boom())
    assert f.load() == 0


def test_signal_arity(cpu):
    f = CompletionFlag(cpu)
    with pytest.raises(TypeError):
        f.signal()
    with pytest.raises(TypeError):
        f.signal(1, 2)
    with pytest.raises(TypeError):
        f.signal(val=1)
    with pytest.raises(TypeError):
        f.load(1)
    with pytest.raises(TypeError):
        f.reset(1)


# --------------------------------------------------------------------------
# Addresses


def test_device_ptr_nonzero_distinct(cpu):
    flags = [CompletionFlag(cpu) for _ in range(32)]
    ptrs = [f.device_ptr for f in flags]
    assert all(type(p) is int and p != 0 for p in ptrs)
    assert len(set(ptrs)) == len(ptrs)
    assert flags[0].device_ptr == ptrs[0]  # stable


def test_device_ptr_read_write_through_ctypes(cpu):
    f = CompletionFlag(cpu)
    slot = ctypes.c_uint64.from_address(f.device_ptr)
    assert slot.value == 0
    f.signal(0x1234_5678_9ABC_DEF0)
    assert slot.value == 0x1234_5678_9ABC_DEF0
    slot.value = 42
    assert f.load() == 42
    f.reset()
    assert slot.value == 0


def test_unsafe_ptr(cpu):
    flags = [CompletionFlag(cpu) for _ in range(8)]
    ups = [f._unsafe_ptr for f in flags]
    assert all(type(p) is int and p != 0 for p in ups)
    assert len(set(ups)) == len(ups)
    for f in flags:
        assert f._unsafe_ptr != f.device_ptr


def test_repr(cpu):
    f = CompletionFlag(cpu)
    f.signal(77)
    r = repr(f)
    assert "cpu" in r.lower()
    assert hex(f.device_ptr).lower()[2:] in r.lower()
    assert "77" in r
    f.signal(123456789)
    r2 = repr(f)
    assert "123456789" in r2


# --------------------------------------------------------------------------
# Threads


def test_usable_from_threads(cpu):
    flags = [CompletionFlag(cpu) for _ in range(8)]
    errors = []

    def worker(i):
        try:
            for v in range(1, 2000):
                flags[i].signal(v)
                if flags[i].load() != v:
                    errors.append((i, v))
                    return
        except Exception as exc:  # pragma: no cover
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert not errors
    assert [f.load() for f in flags] == [1999] * 8


def test_signalled_from_host_function(cpu, enqueue):
    """A host function on one queue releases another queue's gate."""
    qa, qb = DeviceQueue(cpu), DeviceQueue(cpu)
    f = CompletionFlag(cpu)
    done = []
    qb.wait_for_host_value(f, 3)
    enqueue(qb, lambda: done.append("b"))
    enqueue(qa, lambda: f.signal(3))
    qb.synchronize(timeout=WAIT)
    assert done == ["b"]
    assert f.load() == 3


def test_signalled_by_host_function_on_same_queue(cpu, enqueue):
    q = DeviceQueue(cpu)
    f = CompletionFlag(cpu)
    done = []
    enqueue(q, lambda: f.signal(1))
    q.wait_for_host_value(f, 1)
    enqueue(q, lambda: done.append(1))
    q.synchronize(timeout=WAIT)
    assert done == [1]


def test_reset_regates_later_waits(queue, enqueue, rec):
    f = CompletionFlag(queue.device)
    f.signal(1)
    queue.wait_for_host_value(f, 1)
    enqueue(queue, rec.fn("first"))
    queue.synchronize(timeout=WAIT)
    f.reset()
    queue.wait_for_host_value(f, 1)
    enqueue(queue, rec.fn("second"))
    with pytest.raises(TimeoutError):
        queue.synchronize(timeout=0.1)
    assert rec.snapshot() == ["first"]
    f.signal(1)
    queue.synchronize(timeout=WAIT)
    assert rec.snapshot() == ["first", "second"]
