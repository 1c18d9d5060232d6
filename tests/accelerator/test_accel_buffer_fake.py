"""Buffer checks only the fake driver (tests/fake_driver) can answer,
through its control API: live device allocations (allocated and freed in
queue order, nothing left behind by a failed call), injected driver
failures, the device view of pinned memory, the real drivers' rules
recorded as violations (a pageable copy into a busy stream, a free that
would synchronize a gated device, memory used after it was freed), a
driver without memory pools and devices without peer access.  Skipped on a
real driver (SPEC §12.3, §12.6, §12.7)."""

from __future__ import annotations

import ctypes
import functools
import gc
import json
import time

import numpy as np
import pytest
from accel_support import FAKE_LIBRARY, NOT_YET, WAIT, drain, settled_allocs, wait_until
from buffer_support import host_source, open_later, returns_promptly

from max import driver
from max.driver import Accelerator, Buffer, DevicePinnedBuffer, DeviceQueue, Usage
from max.dtype import DType

pytestmark = pytest.mark.skipif(
    FAKE_LIBRARY is None,
    reason="not running on the fake driver (MAX_DRIVER_FAKE_LIBRARY unset)",
)

N = 4096
GIB = str(1 << 30)
ALLOC = {
    "cuda": ("cuMemAllocAsync", "cuMemAlloc"),
    "hip": ("hipMallocAsync", "hipMalloc"),
}
D2D = {
    "cuda": ("cuMemcpyDtoDAsync", "cuMemcpy2DAsync"),
    "hip": ("hipMemcpyDtoDAsync", "hipMemcpy2DAsync"),
}
MEMSET = {
    "cuda": ("cuMemsetD8Async", "cuMemsetD16Async", "cuMemsetD32Async"),
    "hip": ("hipMemsetD8Async", "hipMemsetD16Async", "hipMemsetD32Async"),
}
ERROR_NAME = {
    ("cuda", 1): "CUDA_ERROR_INVALID_VALUE",
    ("hip", 1): "hipErrorInvalidValue",
    ("cuda", 2): "CUDA_ERROR_OUT_OF_MEMORY",
    ("hip", 2): "hipErrorOutOfMemory",
}


class Violations:
    """The fake's record of broken real-driver rules."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.count = lib.fake_gpu_violations
        self.count.argtypes, self.count.restype = [], ctypes.c_int
        self.text = lib.fake_gpu_violation
        self.text.argtypes, self.text.restype = [ctypes.c_int], ctypes.c_char_p
        self.clear = lib.fake_gpu_clear_violations
        self.clear.argtypes, self.clear.restype = [], None

    def all(self) -> list[str]:
        return [(self.text(i) or b"").decode() for i in range(min(self.count(), 64))]


@pytest.fixture
def violations(fake):
    v = Violations(fake.lib)
    v.clear()
    return v


# --------------------------------------------------------------------------
# Device allocations


def test_allocations_live_while_used_and_freed_after(acc, aq, fake):
    base = settled_allocs(fake)
    buf = Buffer(DType.int8, (N,), acc)
    assert fake.live("device_alloc") == base + 1
    views = [buf[1:], buf[::-2], buf.view(DType.int32), buf.to(aq), buf[3]]
    assert fake.live("device_alloc") == base + 1, "a view allocated memory"
    copy = buf.copy()
    assert fake.live("device_alloc") == base + 2
    del buf
    gc.collect()
    assert fake.live("device_alloc") == base + 2, "freed while views use it"
    del views
    gc.collect()
    assert wait_until(lambda: fake.live("device_alloc") == base + 1, timeout=WAIT)
    del copy
    gc.collect()
    assert wait_until(lambda: fake.live("device_alloc") == base, timeout=WAIT)


def test_free_waits_for_the_queue(acc, aq, gate, fake):
    """SPEC §12.3 / §12.7: memory is freed in the order of its queue, after
    every operation that uses it: a buffer dropped while its copy waits
    behind a gate stays allocated until the gate opens."""
    base = settled_allocs(fake)
    buf = Buffer(DType.int32, (N,), aq)
    flag = gate(aq)
    buf.inplace_copy_from(Buffer.from_numpy(np.ones(N, np.int32)))
    del buf
    gc.collect()
    time.sleep(NOT_YET)
    assert fake.live("device_alloc") == base + 1
    flag.signal(1)
    assert wait_until(lambda: fake.live("device_alloc") == base, timeout=WAIT)


def test_memory_error_leaves_nothing_allocated(acc, fake):
    base = settled_allocs(fake)
    bytes_before = fake.live("device_bytes")
    with pytest.raises(MemoryError):
        Buffer(DType.int8, (acc.stats["total_memory"] + 1,), acc)
    with pytest.raises(MemoryError):
        Buffer.zeros((acc.stats["total_memory"] + 1,), DType.int8, acc)
    assert fake.live("device_alloc") == base
    assert fake.live("device_bytes") == bytes_before


def test_injected_allocation_failure_memory_error(acc, api, fake):
    base = settled_allocs(fake)
    try:
        for name in ALLOC[api]:
            assert fake.fail(name, 1, 2) == 0
        with pytest.raises(MemoryError) as exc:
            Buffer(DType.int8, (N,), acc)
    finally:
        fake.lib.fake_gpu_reset()
    assert ERROR_NAME[api, 2] in str(exc.value), str(exc.value)
    assert str(N) in str(exc.value)
    assert fake.live("device_alloc") == base
    assert Buffer.zeros((4,), DType.int8, acc).to_numpy().tolist() == [0] * 4


def test_injected_copy_failure_value_error(acc, api, fake):
    """SPEC §12.7: a driver failure during a copy raises ValueError naming
    the driver's error; the call changes nothing."""
    src = Buffer.from_numpy(np.arange(N, dtype=np.int32)).to(acc)
    dst = Buffer.zeros((N,), DType.int32, acc)
    try:
        for name in D2D[api]:
            assert fake.fail(name, 1, 1) == 0
        with pytest.raises(ValueError) as exc:
            dst.inplace_copy_from(src)
    finally:
        fake.lib.fake_gpu_reset()
    assert ERROR_NAME[api, 1] in str(exc.value), str(exc.value)
    assert not dst.to_numpy().any()
    dst.inplace_copy_from(src)
    assert np.array_equal(dst.to_numpy(), np.arange(N))


def test_injected_fill_failure_value_error(acc, api, fake):
    base = settled_allocs(fake)
    try:
        for name in MEMSET[api]:
            assert fake.fail(name, 1, 1) == 0
        with pytest.raises(ValueError) as exc:
            Buffer.zeros((N,), DType.int32, acc)
    finally:
        fake.lib.fake_gpu_reset()
    assert ERROR_NAME[api, 1] in str(exc.value), str(exc.value)
    assert settled_allocs(fake) == base  # the failed call freed its memory


# --------------------------------------------------------------------------
# Pinned memory: the device view


@pytest.mark.parametrize("make", ["device_pinned", "staging"])
def test_pinned_data_ptr_is_the_device_view(acc, fake, make):
    """SPEC §12.4: for pinned memory ``_data_ptr()`` is the device-visible
    address of the mapping (as CompletionFlag.device_ptr).  The fake maps
    pinned memory twice, so it differs from the host address but shows the
    same bytes."""
    if make == "staging":
        pinned = Buffer(DType.int32, (N,), acc, usage=Usage.STAGING)
    else:
        pinned = DevicePinnedBuffer(DType.int32, (N,), acc)
    host = pinned.to_numpy()
    host[:] = np.arange(N, dtype=np.int32)
    device_ptr = pinned._data_ptr()
    assert device_ptr != host.ctypes.data
    assert ctypes.string_at(device_ptr, host.nbytes) == host.tobytes()
    assert pinned[3:]._data_ptr() == device_ptr + 12
    assert ctypes.string_at(pinned[3:]._data_ptr(), 4) == host[3:4].tobytes()


# --------------------------------------------------------------------------
# The real drivers' rules


def test_no_rule_violations_in_a_buffer_workload(acc, aq, gate, fake, violations):
    """Pageable copies into gated queues are staged (never a pageable
    driver copy on a busy stream), drops with pending copies free nothing
    early, and no free synchronizes a gated device."""
    other = acc1 = None
    if driver.accelerator_count() > 1:
        acc1 = Accelerator(1)
        other = DeviceQueue(acc1)
    flag = gate(aq)
    other_flag = gate(other) if other is not None else None
    ref = np.arange(N, dtype=np.int32)
    dst = Buffer(DType.int32, (N,), aq)
    # A source per copy from host memory: a copy joins its source's queue.
    returns_promptly(functools.partial(dst.inplace_copy_from, host_source(ref)))
    pinned = DevicePinnedBuffer(DType.int32, (N,), acc)
    pinned.inplace_copy_from(host_source(ref))
    d2d = Buffer(DType.int32, (N,), acc)
    d2d.inplace_copy_from(dst)
    strided = dst[::-2].copy()
    staging = Buffer(DType.int32, (N,), acc, usage=Usage.STAGING)
    staging.inplace_copy_from(dst)
    if other is not None:
        peer = Buffer(DType.int32, (N,), other)
        peer.inplace_copy_from(dst)
        del peer
    for _ in range(10):  # dropped while pending, pinned memory included
        tmp = Buffer(DType.int32, (N,), aq)
        tmp.inplace_copy_from(host_source(ref))
        tmp_pinned = DevicePinnedBuffer(DType.int32, (N,), acc)
        tmp_pinned.inplace_copy_from(tmp)
        del tmp, tmp_pinned
    gc.collect()
    time.sleep(NOT_YET)
    flag.signal(1)
    if other_flag is not None:
        other_flag.signal(1)
    assert np.array_equal(d2d.to_numpy(), np.arange(N))
    assert np.array_equal(strided.to_numpy(), np.arange(N)[::-2])
    del dst, pinned, d2d, strided, staging
    drain()
    assert violations.count() == 0, violations.all()


def test_no_violations_while_a_gated_queue_holds_the_device(acc, aq, gate, violations):
    """Creating and dropping device and pinned buffers on one queue while
    another queue of the device is gated: a free that synchronized the
    device would hang here (the fake records it after
    FAKE_GPU_HANG_SECONDS)."""
    flag = gate(aq)
    start = time.monotonic()
    for _ in range(20):
        buf = Buffer.zeros((N,), DType.int8, acc)
        pinned = DevicePinnedBuffer.zeros((N,), DType.int8, acc)
        staging = Buffer(DType.int8, (N,), acc, usage=Usage.STAGING)
        del buf, pinned, staging
        gc.collect()
    acc.default_queue.synchronize(timeout=WAIT)
    assert time.monotonic() - start < 5.0
    flag.signal(1)
    drain()
    assert violations.count() == 0, violations.all()


def test_free_waits_for_every_queue_it_was_handed_to(acc, gate, fake):
    """SPEC §12.7: the free waits for the work of every queue the memory was
    handed to (Buffer.to(stream)), however many: here the gated one is the
    first of 80."""
    base = settled_allocs(fake)
    buf = Buffer(DType.int32, (N,), acc)
    first = DeviceQueue(acc)
    flag = gate(first)
    buf.to(first).inplace_copy_from(Buffer.from_numpy(np.ones(N, np.int32)))
    others = [DeviceQueue(acc) for _ in range(79)]
    for q in others:
        buf.to(q)
    del buf
    gc.collect()
    time.sleep(NOT_YET)
    assert fake.live("device_alloc") == base + 1, "freed before its first queue"
    flag.signal(1)
    assert wait_until(lambda: fake.live("device_alloc") == base, timeout=WAIT)


def test_pending_copy_behind_a_gate_then_dropped(acc, aq, gate, violations):
    """Dropping a copy's source and destination while it waits: no memory
    is used after it was freed (the fake would fail the stream with an
    illegal address and say so)."""
    src = Buffer.from_numpy(np.arange(N, dtype=np.int32)).to(aq)
    dst = Buffer(DType.int32, (N,), acc)
    view = dst[:4]
    flag = gate(aq)
    dst.inplace_copy_from(src)
    del src, dst
    gc.collect()
    open_later(flag)
    assert view.to_numpy().tolist() == [0, 1, 2, 3]
    drain()
    assert violations.count() == 0, violations.all()


# --------------------------------------------------------------------------
# Other fake configurations, in child interpreters


CONFIG_CHILD = r"""
import ctypes, gc, json, os, time
import numpy as np
from max import driver
from max.driver import (Accelerator, Buffer, CompletionFlag, DevicePinnedBuffer,
                        DeviceQueue)
from max.dtype import DType
lib = ctypes.CDLL(os.environ["MAX_DRIVER_FAKE_LIBRARY"])
lib.fake_gpu_live.argtypes = [ctypes.c_char_p]
lib.fake_gpu_violations.restype = ctypes.c_int
lib.fake_gpu_violation.argtypes = [ctypes.c_int]
lib.fake_gpu_violation.restype = ctypes.c_char_p
N = 1 << 16
out = {}
acc = Accelerator(0)
q = DeviceQueue(acc)
out["memory_pools"] = acc._capabilities()["memory_pools"]
ref = np.arange(N, dtype=np.int32)
# Values through every kind of copy, with a gate held while they queue up.
f = CompletionFlag(acc)
q.wait_for_host_value(f, 1)
a = Buffer(DType.int32, (N,), q)
a.inplace_copy_from(Buffer.from_numpy(ref))
b = Buffer(DType.int32, (N,), acc)
b.inplace_copy_from(a)
p = DevicePinnedBuffer(DType.int32, (N,), acc)
p.inplace_copy_from(b)
del a
gc.collect()
f.signal(1)
out["d2d"] = bool(np.array_equal(b.to_numpy(), ref))
acc.synchronize(timeout=20)
out["pinned"] = bool(np.array_equal(p.to_numpy(), ref))
if driver.accelerator_count() > 1:
    acc1 = Accelerator(1)
    out["can_access"] = acc.can_access(acc1)
    c = b.to(acc1)
    out["peer"] = bool(np.array_equal(c.to_numpy(), ref))
    out["peer_back"] = bool(np.array_equal(c[::-1].copy(acc).to_numpy(), ref[::-1]))
# Memory comes back: drop, let the frees take effect, allocate again.
total = acc.stats["total_memory"]
big = Buffer(DType.int8, (total // 2 + 1,), acc)
try:
    Buffer(DType.int8, (total // 2 + 1,), acc)
    out["second_half"] = "allocated"
except MemoryError:
    out["second_half"] = "MemoryError"
del big
gc.collect()
acc.synchronize(timeout=20)
# The free takes effect once the reaper saw the queue pass the memory's
# last use (other frees may land first, so no allocation count is waited
# for): retry until the memory is back.
deadline = time.monotonic() + 20
while True:
    try:
        again = Buffer(DType.int8, (total // 2 + 1,), acc)
        break
    except MemoryError:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.01)
out["again"] = again.num_elements == total // 2 + 1
del again, b, p
gc.collect()
acc.synchronize(timeout=20)
count = min(lib.fake_gpu_violations(), 64)
out["violations"] = [lib.fake_gpu_violation(i).decode() for i in range(count)]
print("JSON" + json.dumps(out), flush=True)
"""


def _child_json(r):
    line = next((x for x in r.stdout.splitlines() if x.startswith("JSON")), None)
    assert line is not None, r.stdout[-3000:] + r.stderr[-3000:]
    return json.loads(line[4:])


@pytest.mark.parametrize(
    "env",
    [
        {"FAKE_GPU_MEMORY_POOLS": "0", "FAKE_GPU_TOTAL_MEM": GIB},
        {"FAKE_GPU_PEER": "0", "FAKE_GPU_TOTAL_MEM": GIB},
        {"FAKE_GPU_TOTAL_MEM": GIB},
    ],
    ids=["no-memory-pools", "no-peer-access", "1-GiB-device"],
)
def test_buffers_under_other_fake_configurations(run_acc_py, env):
    """SPEC §12.3: without memory pools the plain allocator is used, frees
    deferred until the queue passed the memory's last use; §12.6: without
    peer access, peer copies are staged through pinned host memory."""
    r = run_acc_py(CONFIG_CHILD, timeout=120, **env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = _child_json(r)
    assert out["d2d"] and out["pinned"], out
    assert out["memory_pools"] is (env.get("FAKE_GPU_MEMORY_POOLS") != "0")
    if "peer" in out:
        assert out["peer"] and out["peer_back"], out
        if env.get("FAKE_GPU_PEER") == "0":
            assert out["can_access"] is False
    assert out["second_half"] == "MemoryError", out
    assert out["again"], out
    assert out["violations"] == [], out
