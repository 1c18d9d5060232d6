"""The GPU memory path as real drivers run it: the staging ring, host-to-host
copies, the calling thread's context, plain-allocator frees, DLPack
consumers' streams, copies between devices.

Runs on a real GPU where it can and on the fake driver (both APIs, through
tests/test_fake_backends.py); the tests that count driver calls or
allocations, or need the fake's knobs, are fake-only.  Every test also
fails when the backend broke a real-driver rule the fake enforces or a
cleanup failed (tests/accelerator/conftest.py).
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest
from accel_support import WAIT, enqueue, held
from buffer_support import Call, host_source, returns_promptly
from dlpack_support import take

from max.driver import (
    Buffer,
    CompletionFlag,
    DevicePinnedBuffer,
    DeviceQueue,
    HostHazardError,
    Usage,
)
from max.dtype import DType

MIB = 1 << 20


def values(n, seed=0):
    return (np.arange(n, dtype=np.int64) * 2654435761 + seed).astype(np.int32)


class Raw:
    """The driver the backend loaded, called directly (through ctypes, as
    another library would): contexts, and a device-to-host copy."""

    def __init__(self, path, api):
        self.api = api
        self.lib = ctypes.CDLL(path)
        P, S = ctypes.c_void_p, ctypes.c_size_t
        if api == "cuda":
            self.lib.cuDevicePrimaryCtxRetain.argtypes = [P, ctypes.c_int]
            self.lib.cuCtxPushCurrent_v2.argtypes = [P]
            self.lib.cuCtxPopCurrent_v2.argtypes = [P]
            self.lib.cuMemcpyDtoHAsync_v2.argtypes = [P, ctypes.c_uint64, S, P]
        else:
            self.lib.hipSetDevice.argtypes = [ctypes.c_int]
            self.lib.hipMemcpyDtoHAsync.argtypes = [P, P, S, P]

    def push(self, device):
        """Makes `device` current on this thread (CUDA: its primary
        context, pushed)."""
        if self.api == "cuda":
            ctx = ctypes.c_void_p()
            assert self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), device) == 0
            assert self.lib.cuCtxPushCurrent_v2(ctx) == 0
        else:
            assert self.lib.hipSetDevice(device) == 0

    def pop(self):
        if self.api == "cuda":
            assert self.lib.cuCtxPopCurrent_v2(None) == 0

    def copy_to_host(self, dst, src, nbytes, stream):
        fn = (
            self.lib.cuMemcpyDtoHAsync_v2
            if self.api == "cuda"
            else self.lib.hipMemcpyDtoHAsync
        )
        assert fn(dst, src, nbytes, stream) == 0


@pytest.fixture
def raw(fake, api):
    return Raw(fake.path, api)


# ---- The staging ring ---------------------------------------------------------


@pytest.mark.parametrize("mib", [0, 1, 20])
def test_large_copies_round_trip_through_the_ring(acc, aq, mib):
    """Sizes below, at and well above a chunk (8 MiB by default): every
    byte arrives, whichever way, with the queue idle or busy."""
    n = max(1, mib * MIB // 4) + 3
    ref = values(n, mib)
    dev = Buffer(DType.int32, (n,), aq)
    dev.inplace_copy_from(host_source(ref))  # the queue idle: at once
    again = Buffer(DType.int32, (n,), aq)
    again.inplace_copy_from(host_source(ref[::-1].copy()))  # busy: a host step
    assert np.array_equal(dev.to_numpy(), ref)
    assert np.array_equal(again.to_numpy(), ref[::-1])


def test_strided_downloads_and_uploads(acc, aq):
    """Views that 2-D transfers do (a column), that go through the span (a
    negative step), and a strided pageable source."""
    ref = values(2048 * 1536).reshape(2048, 1536)
    dev = Buffer(DType.int32, ref.shape, aq)
    dev.inplace_copy_from(host_source(ref))
    assert np.array_equal(dev[:, 7].to_numpy(), ref[:, 7])
    assert np.array_equal(dev[::-3, 5].to_numpy(), ref[::-3, 5])
    col = host_source(ref)[:, 9].copy(aq)
    assert np.array_equal(col.to_numpy(), ref[:, 9])


def test_uploads_into_a_gated_queue_do_not_wait_and_stay_ordered(acc, gate, rec):
    """The source is read during the call and may be overwritten at once;
    the upload runs when the queue gets there, after the held work."""
    q = DeviceQueue(acc)
    flag = held(q, gate, rec, "held")
    src = host_source(values(3 * MIB))
    dst = Buffer(DType.int32, src.shape, q)
    returns_promptly(lambda: dst.inplace_copy_from(src))
    src.to_numpy()[:] = -1  # read already
    read = Call(dst.to_numpy)
    assert read.blocked() and not rec.has("held")
    flag.signal(1)
    assert np.array_equal(read.value(), values(3 * MIB))


def test_copies_never_allocate_pinned_memory(acc, fake, gate, rec):
    """Copies of new sizes, into a gated queue, downloads and element
    writes all stage through the ring reserved when the device opened: no
    pinned allocation (a driver may synchronize the device for one, which
    would deadlock behind the gate)."""
    q = DeviceQueue(acc)
    before = fake.live("host_alloc")
    flag = held(q, gate, rec, "held")
    dsts = []
    for k in range(5):  # 32 MiB each, into the gated queue
        src = host_source(np.full(8 * MIB, k, np.int32))
        dst = Buffer(DType.int32, src.shape, q)
        returns_promptly(lambda d=dst, s=src: d.inplace_copy_from(s))
        dsts.append(dst)
    other = Buffer(DType.int32, (16 * MIB,), acc)  # 64 MiB on another queue
    other.inplace_copy_from(host_source(values(16 * MIB)))
    assert np.array_equal(returns_promptly(other.to_numpy), values(16 * MIB))
    other[5] = 77
    assert returns_promptly(lambda: other[5].item()) == 77
    assert fake.live("host_alloc") == before
    assert not rec.has("held")
    flag.signal(1)
    for k, dst in enumerate(dsts):
        assert (dst.to_numpy() == k).all()
    assert fake.live("host_alloc") == before


def test_a_failed_upload_step_poisons_the_destination(acc, fake, gate, rec, api):
    """A driver error in a host step (after the call returned) poisons the
    copy's completion: host access raises HostHazardError naming it."""
    q = DeviceQueue(acc)
    flag = held(q, gate, rec, "held")
    dst = Buffer(DType.int32, (1024,), q)
    dst.inplace_copy_from(host_source(values(1024)))  # a host step
    name = "cuMemcpyHtoDAsync" if api == "cuda" else "hipMemcpyHtoDAsync"
    assert fake.fail(name, 1, 1) == 0
    flag.signal(1)
    with pytest.raises(HostHazardError, match=name):
        dst.to_numpy()
    dst.inplace_copy_from(host_source(values(1024, 5)))  # a later write heals
    assert np.array_equal(dst.to_numpy(), values(1024, 5))


def test_a_download_refused_midway_gives_its_chunks_back_intact(acc, fake, api):
    """A download of three pieces whose second DMA the driver refuses: the
    call raises naming the driver's error, after the first piece's DMA is
    through (its chunk goes back to the ring with its fence, not under a
    pending DMA); every chunk is back, so later transfers that use the
    whole ring are exact and nothing waits for a lost chunk."""
    q = DeviceQueue(acc)
    n = 20 * MIB // 4  # three pieces of the default 8 MiB chunks
    dev = Buffer(DType.int32, (n,), q)
    dev.inplace_copy_from(Buffer.from_numpy(values(n)))
    name = "cuMemcpyDtoHAsync" if api == "cuda" else "hipMemcpyDtoHAsync"
    assert fake.fail(name, 2, 1) == 0
    with pytest.raises(ValueError, match=name):
        dev.to_numpy()
    for seed in (1, 2):  # each takes every chunk of the ring in turn
        dev.inplace_copy_from(host_source(values(n, seed)))
        assert np.array_equal(dev.to_numpy(), values(n, seed))


# ---- Copies between host memory -----------------------------------------------


@pytest.mark.parametrize("kind", ["staging", "device_pinned"])
def test_pinned_copies_are_host_memcpys(acc, fake, gate, rec, api, kind):
    """pinned -> pinned into a gated queue returns at once (a driver copy
    between host memory is synchronous and would wait for the gate) and
    runs after the held work; pinned <-> pageable too.  No driver copy."""
    q = DeviceQueue(acc)
    make = (
        (lambda n: Buffer.zeros((n,), DType.int32, q, usage=Usage.STAGING))
        if kind == "staging"
        else (lambda n: DevicePinnedBuffer.zeros((n,), DType.int32, q))
    )
    src = DevicePinnedBuffer.zeros((4,), DType.int32, acc)
    src.to_numpy()[:] = [1, 2, 3, 4]
    dst = make(4)
    acc.synchronize(timeout=WAIT)
    prefix = "cu" if api == "cuda" else "hip"
    entries = [
        prefix + e for e in ("MemcpyHtoDAsync", "MemcpyDtoHAsync", "Memcpy2DAsync")
    ]
    before = {e: fake.calls(e) for e in entries}
    flag = held(q, gate, rec, "held")
    returns_promptly(lambda: dst.inplace_copy_from(src))
    if kind == "device_pinned":  # untracked: its alias reads at once
        assert dst.to_numpy().tolist() == [0, 0, 0, 0]
    else:
        assert Call(dst.to_numpy).blocked()
    flag.signal(1)
    q.synchronize(timeout=WAIT)
    assert dst.to_numpy().tolist() == [1, 2, 3, 4]
    page = host_source(np.array([5, 6, 7, 8], np.int32))
    dst.inplace_copy_from(page)
    back = host_source(np.zeros(4, np.int32))
    back.inplace_copy_from(dst)
    assert back.to_numpy().tolist() == [5, 6, 7, 8]
    assert {e: fake.calls(e) for e in entries} == before


# ---- The calling thread's context ---------------------------------------------


def test_another_devices_context_on_the_calling_thread(acc, acc1, raw, rec):
    """PyTorch or CuPy may leave another device current on a thread: every
    enqueue still runs under its own device (CUDA fails stream work whose
    context is not current)."""
    box = {}

    def work():
        raw.push(1)
        try:
            q = DeviceQueue(acc)
            buf = Buffer.zeros((1024,), DType.int32, q)
            buf.inplace_copy_from(host_source(values(1024)))
            buf[3] = 9
            other = Buffer(DType.int32, (1024,), q)
            other.inplace_copy_from(buf)
            ev = q.record_event()
            acc.default_queue.wait_for(ev)
            enqueue(q, rec.fn("ran"))
            box["out"] = other.to_numpy()
            q.synchronize(timeout=WAIT)
        except BaseException as exc:  # reported below
            box["error"] = exc
        finally:
            raw.pop()

    t = threading.Thread(target=work)
    t.start()
    t.join(WAIT)
    assert "error" not in box, box.get("error")
    expected = values(1024)
    expected[3] = 9
    assert np.array_equal(box["out"], expected) and rec.has("ran")


# ---- Frees ----------------------------------------------------------------------

PLAIN_FREE_CHILD = r"""
import sys, time
sys.path.insert(0, "tests/accelerator")
from accel_support import FAKE_LIBRARY, FakeControl, wait_until
from max.driver import Accelerator, Buffer, CompletionFlag, DeviceQueue
from max.dtype import DType

fake = FakeControl(FAKE_LIBRARY)
acc = Accelerator(0)
assert not acc._capabilities()["memory_pools"]
gated = DeviceQueue(acc)
flag = CompletionFlag(acc)
gated.wait_for_host_value(flag, 1)
buf = Buffer.zeros((1024,), DType.int32, acc)
acc.default_queue.synchronize(timeout=10)
free = "cuMemFree" if acc.api == "cuda" else "hipFree"
frees = fake.calls(free)
del buf  # its free waits for the gated stream
assert wait_until(lambda: fake.calls(free) > frees, timeout=5), "no free"
streams = fake.live("stream")
spare = DeviceQueue(acc)
spare.synchronize(timeout=10)
del spare  # destroyed by the reaper, which must not be stuck in the free
ok = wait_until(lambda: fake.live("stream") == streams, timeout=5)
flag.signal(1)
acc.synchronize(timeout=10)
print("OK" if ok else "STALLED")
"""


def test_plain_frees_do_not_stall_other_cleanup(run_acc_py, fake):
    """Without memory pools a free synchronizes the device; it runs on a
    worker of its own, so the reaper goes on destroying streams meanwhile."""
    r = run_acc_py(PLAIN_FREE_CHILD, FAKE_GPU_MEMORY_POOLS="0", timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "OK", r.stdout + r.stderr
    assert "violation" not in r.stderr, r.stderr


# ---- DLPack consumers ----------------------------------------------------------


def test_exported_memory_outlives_the_consumers_stream_work(acc, raw, fake):
    """The consumer enqueues a read of the exported memory on its stream,
    which is held, and lets go of the capsule; the buffer is dropped too.
    The memory is freed only after that read (an event on the consumer's
    stream, recorded when the deleter ran), never under it."""
    consumer = DeviceQueue(acc)
    flag = CompletionFlag(acc)
    consumer.wait_for_host_value(flag, 1)  # the consumer's stream is held
    buf = Buffer(DType.int32, (256,), acc)
    buf.inplace_copy_from(host_source(values(256)))
    stream = consumer.native_stream_handle
    managed = take(buf.__dlpack__(max_version=(1, 0), stream=stream))
    out = DevicePinnedBuffer.zeros((256,), DType.int32, acc)
    host = out.to_numpy()
    raw.push(0)
    try:
        raw.copy_to_host(host.ctypes.data, managed.dl_tensor.data, 1024, stream)
    finally:
        raw.pop()
    managed.deleter(ctypes.addressof(managed))  # the consumer is done with it
    del buf
    acc.default_queue.synchronize(timeout=WAIT)  # where a free would run
    flag.signal(1)
    consumer.synchronize(timeout=WAIT)
    assert np.array_equal(host, values(256))  # and no violation (conftest)


# ---- Between devices -----------------------------------------------------------


def test_strided_copy_between_two_devices(acc, acc1, gate, rec):
    """Device memory of two devices in a strided copy goes through the host
    in a host step of the destination queue; its staging stays with each
    device (no event of one device recorded on the other's stream, and no
    cleanup failure: conftest checks both)."""
    q0, q1 = DeviceQueue(acc), DeviceQueue(acc1)
    ref = values(512 * 64).reshape(512, 64)
    src = Buffer(DType.int32, ref.shape, q0)
    src.inplace_copy_from(host_source(ref))
    flag = held(q1, gate, rec, "held")
    dst = returns_promptly(lambda: src[:, 3].copy(q1))
    back = Buffer(DType.int32, (512, 64), q1)
    returns_promptly(lambda: back.inplace_copy_from(src))
    flag.signal(1)
    assert np.array_equal(dst.to_numpy(), ref[:, 3])
    assert np.array_equal(back[::-1, 2].to_numpy(), ref[::-1, 2])
    acc.synchronize(timeout=WAIT)
    acc1.synchronize(timeout=WAIT)


ROUND_TRIP_CHILD = r"""
import numpy as np
from max.driver import Accelerator, Buffer, DeviceQueue
from max.dtype import DType

acc = Accelerator(0)
n = (20 << 20) // 4 + 5
ref = (np.arange(n, dtype=np.int64) * 40503).astype(np.int32)
dev = Buffer(DType.int32, (n,), DeviceQueue(acc))
dev.inplace_copy_from(Buffer.from_numpy(ref))
assert np.array_equal(dev.to_numpy(), ref)
assert np.array_equal(dev[::-1].to_numpy(), ref[::-1])
print(acc._capabilities()["staging_ring"])
"""


def test_staging_with_small_chunks_and_several_host_threads(run_acc_py):
    """2 chunks of 1 MiB: a 20 MiB copy takes 20 pieces each way, each
    packed by 3 threads."""
    r = run_acc_py(
        ROUND_TRIP_CHILD,
        MAX_DRIVER_STAGING_CHUNKS="2",
        MAX_DRIVER_STAGING_CHUNK_MIB="1",
        MAX_DRIVER_STAGING_THREADS="3",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str((2, 1 << 20))


# ---- Pinned allocations and the driver's limits --------------------------------


def test_flags_and_queues_while_a_queue_is_gated(acc, fake, gate, rec):
    """Allocating pinned memory may synchronize the device (the fake makes
    it wait for every stream): flags and queues beyond the first slab of
    slots come from the reserve made when the device opened, never from the
    driver, so making them while a queue is gated does not wait for it."""
    q = DeviceQueue(acc)
    before = fake.live("host_alloc")
    flag = held(q, gate, rec, "held")
    flags = returns_promptly(lambda: [CompletionFlag(acc) for _ in range(1100)])
    queues = returns_promptly(lambda: [DeviceQueue(acc) for _ in range(40)])
    assert fake.live("host_alloc") == before
    assert not rec.has("held")
    flag.signal(1)
    assert rec.wait("held", WAIT)
    del flags, queues


MAX_PITCH_CHILD = r"""
import numpy as np
from max.driver import Accelerator, Buffer, DeviceQueue
from max.dtype import DType

acc = Accelerator(0)
q = DeviceQueue(acc)
ref = np.arange(64 * 2048, dtype=np.int32).reshape(64, 2048)  # 8 KiB rows
dev = Buffer(DType.int32, ref.shape, q)
dev.inplace_copy_from(Buffer.from_numpy(ref))
col = dev[:, 5].to_numpy()  # rows 8 KiB apart
sub = dev[:, 1:3].copy(q)  # a 2-D copy would have pitch 8 KiB
q.synchronize()
ok = np.array_equal(col, ref[:, 5]) and np.array_equal(sub.to_numpy(), ref[:, 1:3])
print("OK" if ok else "BAD")
"""


def test_copies_respect_the_maximum_pitch(run_acc_py, fake):
    """With a maximum pitch of 4 KiB, strided copies whose rows lie 8 KiB
    apart move row by row or through the host, never as a 2-D copy the
    driver refuses."""
    r = run_acc_py(MAX_PITCH_CHILD, FAKE_GPU_MAX_PITCH="4096")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "OK", r.stdout + r.stderr
    assert "violation" not in r.stderr, r.stderr
