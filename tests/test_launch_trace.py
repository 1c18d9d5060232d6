"""The launch trace on the CPU (SPEC §14): every copy and fill is recorded
[beyond MAX, which records only CUDA and HIP]; the accelerator version is
tests/accelerator/test_accel_trace.py."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from max import driver
from max.driver import (
    Buffer,
    CompletionFlag,
    DeviceQueue,
    LaunchTraceEntry,
    begin_launch_trace,
    launch_trace,
    take_launch_trace,
)
from max.dtype import DType

WAIT = 20.0
Kind = LaunchTraceEntry.OperationKind
Copy = LaunchTraceEntry.MemcpyKind


def _program(cpu):
    """A fixed program: a fill, two copies (one between queues), a view."""
    q = DeviceQueue(cpu)
    a = Buffer.zeros((8, 4), DType.float32)
    b = Buffer(DType.float32, (8, 4), q)
    b.inplace_copy_from(a)
    c = b[::2, :].copy()
    q.synchronize(timeout=WAIT)
    return c


def test_enums_have_max_values():
    assert [(m.name, int(m)) for m in Kind] == [
        ("KERNEL_LAUNCH", 0),
        ("MEMCPY", 1),
        ("MEMSET", 2),
    ]
    assert [(m.name, int(m)) for m in Copy] == [
        ("NONE", 0),
        ("HTOD", 1),
        ("DTOH", 2),
        ("DTOD", 3),
    ]


def test_names_are_exported():
    from max._core import driver as core

    for name in ("LaunchTraceEntry", "begin_launch_trace", "take_launch_trace"):
        assert name in driver.__all__
        assert getattr(driver, name) is getattr(core, name)
    assert "launch_trace" in driver.__all__


def test_take_without_begin_is_empty():
    take_launch_trace()
    assert take_launch_trace() == []
    Buffer.zeros((4,), DType.int8)
    assert take_launch_trace() == []  # nothing was recording


def test_fill_and_copies_in_enqueue_order(cpu):
    begin_launch_trace()
    _program(cpu)
    entries = take_launch_trace()
    assert [e.kind for e in entries] == [Kind.MEMSET, Kind.MEMCPY, Kind.MEMCPY]
    fill, copy, strided = entries
    assert fill.name == "memset"
    assert fill.memset_byte_size == 8 * 4 * 4
    assert fill.memset_value == 0
    assert fill.memset_value_size == 4
    assert fill.memcpy_kind is Copy.NONE and fill.memcpy_byte_size == 0
    for e in (copy, strided):
        assert e.name == "memcpy"
        assert e.memcpy_kind is Copy.DTOD  # SPEC: CPU to CPU is DTOD
        assert e.memset_byte_size == 0
    assert copy.memcpy_byte_size == 8 * 4 * 4
    assert strided.memcpy_byte_size == 4 * 4 * 4
    for e in entries:
        assert (e.grid_x, e.grid_y, e.grid_z) == (0, 0, 0)
        assert (e.block_x, e.block_y, e.block_z) == (0, 0, 0)
        assert e.shared_mem_bytes == 0
        assert e.semantic_hash != 0


def test_stream_index_numbers_queues_as_first_seen(cpu):
    q1, q2 = DeviceQueue(cpu), DeviceQueue(cpu)
    begin_launch_trace()
    Buffer.zeros((4,), DType.int8, q2)
    Buffer.zeros((4,), DType.int8, q1)
    Buffer.zeros((4,), DType.int8, q2)
    Buffer.zeros((4,), DType.int8, cpu)
    entries = take_launch_trace()
    assert [e.stream_index for e in entries] == [0, 1, 0, 2]


def test_semantic_hash_ignores_addresses(cpu):
    traces = []
    for _ in range(2):
        with launch_trace() as entries:
            _program(cpu)
        traces.append([e.semantic_hash for e in entries])
    assert traces[0] == traces[1]
    with launch_trace() as other:
        Buffer.zeros((9, 4), DType.float32)  # another size: another hash
    assert other[0].semantic_hash != traces[0][0]


def test_begin_clears_an_earlier_recording():
    begin_launch_trace()
    Buffer.zeros((4,), DType.int8)
    begin_launch_trace()
    Buffer.zeros((5,), DType.int8)
    entries = take_launch_trace()
    assert [e.memset_byte_size for e in entries] == [5]


def test_context_manager_stops_on_an_exception():
    with pytest.raises(KeyError):
        with launch_trace() as entries:
            Buffer.zeros((4,), DType.int8)
            raise KeyError("boom")
    assert len(entries) == 1
    Buffer.zeros((4,), DType.int8)
    assert take_launch_trace() == []  # stopped


def test_zero_copy_operations_host_work_and_waits_record_nothing(cpu):
    a = np.arange(16, dtype=np.float32)
    q = DeviceQueue(cpu)
    flag = CompletionFlag(cpu)
    with launch_trace() as entries:
        b = Buffer.from_numpy(a)  # zero-copy
        b[2:10]  # a view
        b.view(DType.int32)
        b.to(q)  # same device: a rebinding
        b.to(cpu)
        b.to_numpy()
        b[3].item()
        getattr(q, "__unsafe_enqueue_py_host_func")(lambda: None)
        q.wait_for(cpu.default_queue)
        q.wait_for_host_value(flag, 0)
        q.record_event().synchronize(timeout=WAIT)
    assert entries == []


def test_each_staged_copy_is_one_entry(cpu, gate):
    """A copy into a busy queue waits in a staging buffer: still one entry."""
    q = DeviceQueue(cpu)
    dst = Buffer(DType.int32, (64,), q)
    src = Buffer.from_numpy(np.arange(64, dtype=np.int32))
    f = gate(q)
    with launch_trace() as entries:
        dst.inplace_copy_from(src)
    f.signal(1)
    q.synchronize(timeout=WAIT)
    assert len(entries) == 1 and entries[0].memcpy_byte_size == 256


def test_entries_are_read_only_and_not_constructible():
    with launch_trace() as entries:
        Buffer.zeros((4,), DType.int8)
    e = entries[0]
    for name in ("kind", "name", "semantic_hash", "stream_index", "memcpy_kind"):
        with pytest.raises(AttributeError):
            setattr(e, name, 1)
    with pytest.raises(TypeError):
        LaunchTraceEntry()
    assert "MEMSET" in repr(e) and "memset" in repr(e)


def test_recording_is_process_wide_and_thread_safe(cpu):
    def work():
        for _ in range(50):
            Buffer.zeros((4,), DType.int8)

    with launch_trace() as entries:
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(entries) == 200


def test_scalar_and_element_write_on_the_cpu(cpu):
    with launch_trace() as entries:
        s = Buffer.scalar(3, DType.int64)  # a fill of one element
        s[()] = 4  # a host write: no copy on the CPU
    assert [e.kind for e in entries] == [Kind.MEMSET]
    assert entries[0].memset_value == 3 and entries[0].memset_value_size == 8
