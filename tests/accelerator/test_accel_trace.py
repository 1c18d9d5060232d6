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


# --------------------------------------------------------------------------
# The name is an entry point the copy used (watched through the fake's
# call counters)

COPY_ENTRY_POINTS = (
    "MemcpyHtoDAsync", "MemcpyDtoHAsync", "MemcpyDtoDAsync", "MemcpyPeerAsync",
    "Memcpy2DAsync", "MemsetD8Async", "MemsetD16Async", "MemsetD32Async",
)  # fmt: skip


def _grid(device, rows=16, cols=24):
    ref = np.arange(rows * cols, dtype=np.int32).reshape(rows, cols)
    return Buffer.from_numpy(ref).to(device), ref


def _pinned(acc, shape):
    return Buffer.zeros(shape, DType.int32, acc, usage=Usage.STAGING)


TRUTH_CASES = {
    # The case: a strided download into pageable memory.
    "strided download": lambda acc, acc1: _grid(acc)[0][:, ::2].to(CPU()),
    "negative-step download": lambda acc, acc1: _grid(acc)[0][::-1, :].to(CPU()),
    "strided item": lambda acc, acc1: _grid(acc)[0][3, 5].item(),
    "strided to_numpy": lambda acc, acc1: _grid(acc)[0][::3, 1::4].to_numpy(),
    "device into pinned": lambda acc, acc1: _pinned(acc, (16, 24)).inplace_copy_from(
        _grid(acc)[0]
    ),
    "strided device copy": lambda acc, acc1: _grid(acc)[0][:, ::2].copy(),
    "negative-step device copy": lambda acc, acc1: _grid(acc)[0][::-1, :].copy(),
    "strided pinned to device": lambda acc, acc1: _pinned(acc, (16, 24))[:, ::2].copy(
        acc
    ),
    "strided peer copy": lambda acc, acc1: _grid(acc)[0][:, ::2].copy(acc1),
    "negative-step peer copy": lambda acc, acc1: _grid(acc)[0][::-1, :].copy(acc1),
    "upload": lambda acc, acc1: Buffer.from_numpy(np.ones(64, np.int32)).to(acc),
    "fill of 8-byte elements": lambda acc, acc1: Buffer.zeros((8,), DType.int64, acc),
    "element write": lambda acc, acc1: Buffer.zeros((4, 4), DType.int32, acc)[
        ::2, ::2
    ].__setitem__((1, 1), 3),
}


@pytest.mark.parametrize("case", sorted(TRUTH_CASES))
def test_trace_names_entry_points_the_driver_received(acc, acc1, prefix, fake, case):
    """SPEC §14: ``name`` is a driver entry point the copy or fill used, on
    every path (2-D copies, spans through the host, staging rings)."""
    names = [prefix + n for n in COPY_ENTRY_POINTS]
    run = TRUTH_CASES[case]
    run(acc, acc1)  # made once: the setup's own copies are not traced
    acc.synchronize(timeout=WAIT)
    before = {n: fake.calls(n) for n in names}
    with launch_trace() as entries:
        run(acc, acc1)
    for dev in (acc, acc1):
        dev.synchronize(timeout=WAIT)
    called = {n for n in names if fake.calls(n) > before[n]}
    assert entries, case
    for e in entries:
        assert e.name in called, (case, e.name, sorted(called))
