"""The launch trace on accelerators (SPEC §14): every copy is one MEMCPY
entry named after the driver entry point, staged copies included; every
fill one MEMSET entry; pinned memory counts as host."""

from __future__ import annotations

import numpy as np
import pytest
from accel_support import WAIT

from max.driver import (
    CPU,
    Buffer,
    DevicePinnedBuffer,
    DeviceQueue,
    LaunchTraceEntry,
    Usage,
    launch_trace,
)
from max.dtype import DType

Kind = LaunchTraceEntry.OperationKind
Copy = LaunchTraceEntry.MemcpyKind
N = 256


@pytest.fixture
def prefix(api):
    return "cu" if api == "cuda" else "hip"


def _only(entries):
    assert len(entries) == 1, entries
    return entries[0]


def test_upload_from_pageable_is_one_htod_entry(acc, prefix, gate):
    """Staged through pinned memory, while the destination's queue is
    gated: one entry, HTOD, on the destination's queue."""
    q = DeviceQueue(acc)
    dst = Buffer(DType.float32, (N,), q)
    src = Buffer.from_numpy(np.arange(N, dtype=np.float32))
    f = gate(q)
    with launch_trace() as entries:
        dst.inplace_copy_from(src)
    f.signal(1)
    q.synchronize(timeout=WAIT)
    e = _only(entries)
    assert e.kind is Kind.MEMCPY
    assert e.name == f"{prefix}MemcpyHtoDAsync"
    assert e.memcpy_kind is Copy.HTOD
    assert e.memcpy_byte_size == N * 4
    assert e.stream_index == 0


def test_download_into_pageable_is_one_dtoh_entry(acc, prefix):
    src = Buffer.zeros((N,), DType.int16, acc)
    with launch_trace() as entries:
        src.to(CPU())
    e = _only(entries)
    assert e.name == f"{prefix}MemcpyDtoHAsync"
    assert e.memcpy_kind is Copy.DTOH and e.memcpy_byte_size == N * 2


def test_device_to_device(acc, prefix):
    a = Buffer.zeros((N,), DType.int32, acc)
    b = Buffer(DType.int32, (N,), acc)
    with launch_trace() as entries:
        b.inplace_copy_from(a)
    e = _only(entries)
    assert e.name == f"{prefix}MemcpyDtoDAsync"
    assert e.memcpy_kind is Copy.DTOD


def test_peer_copy(acc, acc1, prefix):
    a = Buffer.zeros((N,), DType.int32, acc)
    with launch_trace() as entries:
        b = a.to(acc1)
    e = _only(entries)
    assert e.memcpy_kind is Copy.DTOD
    assert e.name in (f"{prefix}MemcpyPeerAsync", f"{prefix}MemcpyDtoHAsync")
    assert np.array_equal(b.to_numpy(), np.zeros(N, np.int32))


@pytest.mark.parametrize("make", ["device_pinned", "staging"])
def test_pinned_memory_counts_as_host(acc, prefix, make):
    if make == "device_pinned":
        pinned = DevicePinnedBuffer(DType.int8, (N,), acc)
    else:
        pinned = Buffer(DType.int8, (N,), acc, usage=Usage.STAGING)
    device = Buffer.zeros((N,), DType.int8, acc)
    with launch_trace() as entries:
        device.inplace_copy_from(pinned)
        pinned.inplace_copy_from(device)
    up, down = entries
    assert up.memcpy_kind is Copy.HTOD and up.name == f"{prefix}MemcpyHtoDAsync"
    assert down.memcpy_kind is Copy.DTOH
    assert down.name == f"{prefix}MemcpyDtoHAsync"


def test_zeros_is_one_memset_entry(acc, prefix):
    with launch_trace() as entries:
        Buffer.zeros((N,), DType.float32, acc)
    e = _only(entries)
    assert e.kind is Kind.MEMSET
    assert e.name.startswith(f"{prefix}MemsetD")
    assert e.memset_byte_size == N * 4
    assert e.memset_value == 0
    assert e.memset_value_size in (1, 2, 4)
    assert e.memcpy_kind is Copy.NONE


def test_element_write_is_one_htod_entry(acc, prefix):
    """SPEC §12.5: on accelerator memory buf[i] = v is a one-element
    host-to-device copy."""
    buf = Buffer.zeros((4,), DType.int32, acc)
    with launch_trace() as entries:
        buf[2] = 7
    e = _only(entries)
    assert e.memcpy_kind is Copy.HTOD and e.memcpy_byte_size == 4
    assert e.name == f"{prefix}MemcpyHtoDAsync"
    assert buf[2].item() == 7


@pytest.mark.parametrize("step", [2, -1])
def test_strided_copies_are_one_entry(acc, step):
    """2-D copies or the span through the host: one entry either way."""
    src = Buffer.from_numpy(np.arange(4 * N, dtype=np.int32)).to(acc)
    with launch_trace() as entries:
        view = src[::step]
        copy = view.copy()
    e = _only(entries)
    assert e.kind is Kind.MEMCPY
    assert e.memcpy_byte_size == view.num_elements * 4
    assert np.array_equal(copy.to_numpy(), np.arange(4 * N, dtype=np.int32)[::step])


def test_zero_copy_moves_record_nothing(acc):
    buf = Buffer.zeros((N,), DType.int8, acc)
    q = DeviceQueue(acc)
    with launch_trace() as entries:
        buf.to(acc)
        buf.to(q)
        buf[1:5]
        buf.view(DType.uint8)
        q.wait_for(acc.default_queue)
    assert entries == []


def test_hashes_repeat_across_runs(acc):
    def run():
        with launch_trace() as entries:
            a = Buffer.zeros((N,), DType.float16, acc)
            a.to(CPU())
        return [e.semantic_hash for e in entries]

    assert run() == run()
