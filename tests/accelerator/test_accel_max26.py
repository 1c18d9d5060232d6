"""MAX 26.7's newer surface on an accelerator: borrowed handles
(``_release_buffers_to_borrowed``, the contract of MAX's
test_hazard_gpu.py), ``_ChunkedStagingRegion`` over the pinned pool, and
``SymmetricPool`` over multicast objects (CUDA; the fake driver models
them, FAKE_GPU_MULTICAST=0 turns them off)."""

from __future__ import annotations

import ctypes
import gc
import threading

import numpy as np
import pytest
from accel_support import NOT_YET, WAIT

from max import driver
from max._core.driver import (
    SymmetricPool,
    _ChunkedStagingRegion,
    _release_buffers_to_borrowed,
)
from max.driver import Buffer, CompletionFlag, DeviceQueue, Usage
from max.dtype import DType

SENTINEL = np.arange(1, 5, dtype=np.int32)


# ---- borrowed handles ------------------------------------------------------------


def _read_while_gated(acc, buf):
    """Reads ``buf`` on a thread while acc's default queue is gated behind
    unrelated work; returns (the read finished while gated, its value).
    The positive control: acc.synchronize() stays blocked meanwhile."""
    flag = CompletionFlag(acc)
    unrelated = Buffer(DType.int32, (4,), acc), Buffer(DType.int32, (4,), acc)
    box = {}
    read_done, sync_done = threading.Event(), threading.Event()

    def read():
        box["value"] = buf.to_numpy()
        read_done.set()

    def sync():
        acc.synchronize(timeout=WAIT)
        sync_done.set()

    threads = [threading.Thread(target=f, daemon=True) for f in (read, sync)]
    try:
        acc.default_queue.wait_for_host_value(flag, 1)
        unrelated[0].inplace_copy_from(unrelated[1])
        for t in threads:
            t.start()
        finished = read_done.wait(WAIT)
        assert not sync_done.wait(NOT_YET), "the gate did not hold the device"
    finally:
        flag.signal(1)
        for t in threads:
            t.join(WAIT)
    return finished, box.get("value")


def test_a_borrowed_handle_shares_the_storage_and_its_record(acc):
    """As MAX's test_a_borrowed_handle_inherits_its_parents_history: a copy
    issued through the handle is in the storage's record, so a host read
    waits for that copy and for nothing else."""
    staging = Buffer(DType.int32, (4,), acc, usage=Usage.STAGING)
    src = Buffer.from_numpy(SENTINEL).to(acc)
    (handle,) = _release_buffers_to_borrowed([staging])
    assert handle is not staging and type(handle) is Buffer
    assert handle._data_ptr() == staging._data_ptr()
    assert handle._host_hazard_tracked and handle.stream is staging.stream
    handle._inplace_copy_from(src)
    finished, value = _read_while_gated(acc, handle)
    assert finished, "the read waited for unrelated work behind the gate"
    assert value.tolist() == SENTINEL.tolist()
    assert staging.to_numpy().tolist() == SENTINEL.tolist()


def test_a_borrowed_handle_keeps_the_memory(acc):
    """Here the handle shares ownership: it outlives its parent."""
    parent = Buffer.from_numpy(SENTINEL).to(acc)
    (handle,) = _release_buffers_to_borrowed([parent[1:3]])
    del parent
    gc.collect()
    assert handle.to_numpy().tolist() == SENTINEL[1:3].tolist()


# ---- _ChunkedStagingRegion -------------------------------------------------------


def test_a_staging_region_in_whole_rows_and_pages(acc):
    region = _ChunkedStagingRegion(3 << 20, 3 << 10, acc, chunk_bytes=1 << 20)
    assert (region.byte_size, region.row_bytes) == (3 << 20, 3 << 10)
    assert region.device is acc and not region.driver_alloc
    assert region.chunk_bytes % region.row_bytes == 0
    assert region.chunk_bytes % 4096 == 0 and region.chunk_bytes >= 1 << 20
    n = -(-region.byte_size // region.chunk_bytes)
    assert region.num_chunks == n
    assert region.chunk_addresses == [
        region.address + i * region.chunk_bytes for i in range(n)
    ]
    ctypes.memset(region.address, 7, region.byte_size)  # all of it writable
    assert ctypes.string_at(region.address + region.byte_size - 1, 1) == b"\x07"


def test_a_driver_allocated_region_has_no_single_base(acc):
    region = _ChunkedStagingRegion(
        4 << 20, 4096, acc, chunk_bytes=1 << 20, driver_alloc=True
    )
    addresses = region.chunk_addresses
    assert region.driver_alloc and len(addresses) == region.num_chunks == 4
    assert len(set(addresses)) == 4
    for address in addresses:
        ctypes.memset(address, 1, region.chunk_bytes)
    with pytest.raises(RuntimeError, match="chunk_addresses"):
        region.address  # noqa: B018
    with pytest.raises(ValueError, match="mlock"):
        _ChunkedStagingRegion(4096, 4096, acc, driver_alloc=True, mlock_pages=True)


def test_an_mlocked_region(acc):
    region = _ChunkedStagingRegion(1 << 20, 4096, acc, mlock_pages=True)
    assert region.mlocked
    ctypes.memset(region.address, 0, region.byte_size)


@pytest.mark.parametrize(
    "args, error",
    [
        ((0, 64), ValueError),
        ((4096, 0), ValueError),
        ((4000, 64), ValueError),  # not whole rows
        ((-1, 64), TypeError),
        (("4096", 64), TypeError),
    ],
)
def test_staging_region_arguments(acc, args, error):
    with pytest.raises(error):
        _ChunkedStagingRegion(*args, acc)


def test_dropping_a_region_drains_the_device_first(acc):
    """Its release waits for the device (a transfer may still read it), as
    MAX's: a gated queue holds the release back until released."""
    region = _ChunkedStagingRegion(1 << 20, 4096, acc)
    flag = CompletionFlag(acc)
    q = DeviceQueue(acc)
    q.wait_for_host_value(flag, 1)
    released = threading.Event()

    def drop():
        nonlocal region
        del region
        released.set()

    t = threading.Thread(target=drop, daemon=True)
    t.start()
    assert not released.wait(NOT_YET), "the release did not wait for the device"
    flag.signal(1)
    assert released.wait(WAIT)
    t.join(WAIT)


# ---- SymmetricPool ---------------------------------------------------------------


@pytest.fixture(scope="module")
def two():
    if driver.accelerator_count() < 2:
        pytest.skip("needs two accelerators")
    return [driver.Accelerator(0), driver.Accelerator(1)]


@pytest.fixture(scope="module")
def pool(two):
    """The pool of accelerators 0 and 1 (made once: a pool lives as long as
    the process)."""
    if not SymmetricPool.is_supported(two):
        pytest.skip(f"{two[0].api} devices here have no multicast support")
    return SymmetricPool.lookup(two) or SymmetricPool.allocate(two, 3 << 20)


def test_a_pool_is_registered_for_its_devices(pool, two):
    assert SymmetricPool.lookup(two[::-1]) == pool  # any order
    assert hash(SymmetricPool.lookup(two)) == hash(pool)
    assert SymmetricPool.lookup(two[:1]) is None
    assert pool.byte_size == 3 << 20
    with pytest.raises(RuntimeError, match="registered"):
        SymmetricPool.allocate(two, 1 << 20)


def test_pool_views_are_flat_bytes_of_each_device(pool, two):
    for device in two:
        for view in (pool.unicast_view(device), pool.multicast_view(device)):
            assert view.dtype is DType.uint8 and view.shape == (pool.byte_size,)
            assert view.device is device and view.is_contiguous
    a, b = (pool.unicast_view(d).view(DType.int32)[:4] for d in two)
    a.inplace_copy_from(Buffer.from_numpy(SENTINEL).to(two[0]))
    b.inplace_copy_from(Buffer.from_numpy(SENTINEL * 2).to(two[1]))
    assert a.to_numpy().tolist() == SENTINEL.tolist()
    assert b.to_numpy().tolist() == (SENTINEL * 2).tolist()  # its own memory
    assert pool.multicast_view(two[0])._data_ptr() != a._data_ptr()
    with pytest.raises(RuntimeError, match="does not span"):
        pool.unicast_view(driver.CPU())


def test_pool_arguments(two):
    with pytest.raises(TypeError, match="cannot be created"):
        SymmetricPool()
    with pytest.raises(RuntimeError, match="at least two"):
        SymmetricPool.allocate(two[:1], 1 << 20)
    with pytest.raises(RuntimeError, match="twice|multicast"):
        SymmetricPool.allocate([two[0], two[0]], 1 << 20)
    with pytest.raises(RuntimeError, match="multicast"):
        SymmetricPool.allocate([two[0], driver.CPU()], 1 << 20)
    with pytest.raises(ValueError, match="positive"):
        SymmetricPool.allocate(two, 0)
    with pytest.raises(TypeError):
        SymmetricPool.allocate(two[0], 1 << 20)
    assert not SymmetricPool.is_supported([two[0], driver.CPU()])


def test_hip_devices_have_no_multicast(two):
    if two[0].api != "hip":
        pytest.skip("CUDA devices")
    assert not SymmetricPool.is_supported(two)
    with pytest.raises(RuntimeError, match="multicast"):
        SymmetricPool.allocate(two, 1 << 20)


def test_a_driver_without_multicast(fake, two, run_acc_py):
    """FAKE_GPU_MULTICAST=0: the devices say so, before anything is
    allocated, and allocate raises RuntimeError as MAX does."""
    code = (
        "from max import driver\n"
        "from max._core.driver import SymmetricPool\n"
        "d = [driver.Accelerator(0), driver.Accelerator(1)]\n"
        "print(SymmetricPool.is_supported(d))\n"
        "try:\n"
        "    SymmetricPool.allocate(d, 1 << 20)\n"
        "except RuntimeError as exc:\n"
        "    print('RuntimeError', exc)\n"
    )
    result = run_acc_py(code, FAKE_GPU_MULTICAST="0")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "False"
    assert lines[1].startswith("RuntimeError") and "multicast" in lines[1]
